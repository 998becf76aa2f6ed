"""Build an agent from its settings and run it until SIGINT or SIGTERM.

The one entry point for an agent process: `schedulearn agent` calls
`run_agent(config)`, and so can `schedulearn up` for its local agent.
Set-up errors (no Docker engine, a bad `--gpus`) are raised as
`AgentError` before anything is registered, with what to change.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from schedulearn.agent.config import AgentConfig
from schedulearn.agent.daemon import Agent, AgentError
from schedulearn.agent.executors.base import ExecutorImpl, StartError
from schedulearn.agent.executors.process import SubprocessExecutor
from schedulearn.agent.gpus import GpuDiscoveryError, GpuSource, discover_gpus
from schedulearn.protocol import Executor

log = logging.getLogger(__name__)


def build_executors(config: AgentConfig) -> dict[Executor, ExecutorImpl]:
    executors: dict[Executor, ExecutorImpl] = {}
    for kind in dict.fromkeys(config.executors):
        if kind is Executor.SUBPROCESS:
            executors[kind] = SubprocessExecutor(config.name, default_workdir=config.workdir)
        elif kind is Executor.DOCKER:
            # Imported here: a subprocess-only agent never loads the Docker SDK.
            from schedulearn.agent.executors.container import DockerExecutor

            try:
                executors[kind] = DockerExecutor(
                    config.name,
                    base_url=config.docker_url,
                    network_mode=config.network_mode,
                    gpu_mode=config.gpu_mode,
                    init=config.container_init,
                    ulimits=config.container_ulimits,
                )
            except StartError as exc:
                raise AgentError(str(exc)) from exc
    if not executors:
        raise AgentError("the agent offers no executor; pass --executor subprocess or docker")
    return executors


def build_agent(config: AgentConfig, gpus: GpuSource | None = None) -> Agent:
    if gpus is None:
        try:
            gpus = discover_gpus(config.gpus, config.gpu_type, config.name)
        except GpuDiscoveryError as exc:
            raise AgentError(str(exc)) from exc
    return Agent(config, gpus, build_executors(config))


async def serve(config: AgentConfig, stop: asyncio.Event | None = None) -> None:
    """Run an agent in this event loop until `stop` is set or a signal arrives."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, stop.set)
            installed.append(signum)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (an agent embedded in a test or in `up`)
    try:
        agent = build_agent(config)
        await agent.run(stop)
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


def run_agent(config: AgentConfig) -> None:
    """Blocking: run an agent process's whole life. Raises `AgentError`."""
    asyncio.run(serve(config))
