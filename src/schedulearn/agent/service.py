"""Build an agent from its settings and run it until SIGINT or SIGTERM.

The one entry point for an agent process: `schedulearn agent` calls
`run_agent(config)`, and so can `schedulearn up` for its local agent.
Set-up errors (no Docker engine, a bad `--gpus`) are raised as
`AgentError` before anything is registered, with what to change.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal

from schedulearn.agent.config import AgentConfig
from schedulearn.agent.daemon import Agent, check_jobs_as
from schedulearn.agent.errors import AgentError
from schedulearn.agent.executors import registry
from schedulearn.agent.executors.base import ExecutorImpl, StartError
from schedulearn.agent.gpus import GpuDiscoveryError, GpuSource, discover_gpus
from schedulearn.protocol import Executor

log = logging.getLogger(__name__)


def build_executors(config: AgentConfig) -> dict[Executor, ExecutorImpl]:
    """The executors the agent was told to offer, built through the registry."""
    executors: dict[Executor, ExecutorImpl] = {}
    for kind in dict.fromkeys(config.executors):
        try:
            executors[kind] = registry.build(kind, config)
        except (StartError, registry.UnknownExecutor) as exc:
            raise AgentError(str(exc)) from exc
    if not executors:
        raise AgentError("the agent offers no executor; pass --executor subprocess or docker")
    return executors


def build_agent(config: AgentConfig, gpus: GpuSource | None = None) -> Agent:
    # Before the executors: whether the agent may run jobs as their owners at all
    # is the first thing to say (its cgroups are looked for next).
    check_jobs_as(config)
    if gpus is None:
        try:
            gpus = discover_gpus(
                config.gpus, config.gpu_type, config.name, device_dir=config.gpu_device_dir
            )
        except GpuDiscoveryError as exc:
            raise AgentError(str(exc)) from exc
    # The executors' device rules need each GPU's device node.
    config = dataclasses.replace(config, gpu_devices=gpus.device_paths())
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
