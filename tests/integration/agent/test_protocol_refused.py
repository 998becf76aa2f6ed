"""An agent older than the server speaks stops at once with the server's message
(both versions, what to upgrade), against a real server process; an agent of
this release's version registers, and so does one of a later protocol, which
speaks this server's version to it (`protocol_calls`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_support import AGENT_TOKEN, AdminApi, ServerProc

from schedulearn.agent.client import AgentClient
from schedulearn.agent.config import AgentConfig
from schedulearn.agent.daemon import Agent
from schedulearn.agent.errors import AgentError
from schedulearn.agent.gpus import discover_gpus
from schedulearn.agent.service import build_executors
from schedulearn.protocol import OLDEST_PROTOCOL, PROTOCOL_VERSION
from waiting import wait_until


def _agent_of_protocol(server: ServerProc, tmp_path: Path, version: int) -> AgentConfig:
    return AgentConfig(
        server=server.url,
        token=AGENT_TOKEN,
        name=f"v{version}",
        state_dir=tmp_path / f"state-v{version}",
        address="127.0.0.1",
        gpus=1,
        poll_wait_seconds=1.0,
    )


async def _run(config: AgentConfig, version: int, stop: asyncio.Event) -> None:
    client = AgentClient(config.server, config.token, protocol=version)
    gpus = discover_gpus(config.gpus, None, config.name)
    await Agent(config, gpus, build_executors(config), client).run(stop)


def test_an_agent_the_server_does_not_speak_to_stops_and_says_what_to_upgrade(
    server: ServerProc, api: AdminApi, tmp_path: Path
) -> None:
    version, upgrade = OLDEST_PROTOCOL - 1, "upgrade the agent"
    config = _agent_of_protocol(server, tmp_path, version)

    async def scenario() -> AgentError:
        with pytest.raises(AgentError) as refused:
            await asyncio.wait_for(_run(config, version, asyncio.Event()), timeout=60)
        return refused.value

    message = str(asyncio.run(scenario()))
    assert f"this agent speaks protocol {version}, this server speaks" in message
    assert f"{OLDEST_PROTOCOL}..{PROTOCOL_VERSION}; {upgrade}" in message
    assert api.http.get("/nodes").json()["items"] == []


@pytest.mark.parametrize("version", [PROTOCOL_VERSION, PROTOCOL_VERSION + 1])
def test_an_agent_of_this_release_or_a_later_protocol_registers(
    server: ServerProc, api: AdminApi, tmp_path: Path, version: int
) -> None:
    config = _agent_of_protocol(server, tmp_path, version)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(_run(config, version, stop))
        try:
            await asyncio.to_thread(
                wait_until,
                lambda: api.http.get("/nodes").json()["items"],
                30,
                "the agent to register",
            )
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=30)

    asyncio.run(scenario())
