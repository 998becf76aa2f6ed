"""An agent told to register again checks its lease first.

An agent that hung (SIGSTOP, swapped out) past its lease can get the
server's "register again" (a heartbeat reply, a 404 to a work request)
before its own lease check has run. The lapse must still go first: it
stops the runs the guard stops and registers without them; a plain
registration would renew the lease and hide the lapse. Real processes do
this in tests/integration/agent/test_agent_loop.py, where the order is
up to the timing; here the order is forced on a manual clock.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from schedulearn.agent.config import AgentConfig
from schedulearn.agent.daemon import Agent
from schedulearn.agent.gpus import VirtualGpus
from schedulearn.agent.lease import Lease
from schedulearn.agent.leasekeeper import LeaseKeeper
from schedulearn.clock import ManualClock
from schedulearn.protocol import HeartbeatReply


class RecordingAgent(Agent):
    """Records which way it goes instead of talking to a server."""

    def __init__(self, state_dir: Path, clock: ManualClock) -> None:
        config = AgentConfig(
            server="http://127.0.0.1:9", token="t", name="n1", state_dir=state_dir, address=""
        )
        super().__init__(config, VirtualGpus(1, "virtual", node_name="n1"), executors={})
        self.lease = LeaseKeeper(
            state_dir, on_lapse=self._lapse_from_thread, clock=clock.now, start_guard=False
        )
        self.went: list[str] = []

    async def _register(self, *args: object, **kwargs: object) -> None:
        self.went.append("register")

    async def _lease_lapsed(self) -> None:
        self.went.append("lapse")


async def told_to_register_again(tmp_path: Path, lease_left: float) -> list[str]:
    clock = ManualClock(1000.0)
    agent = RecordingAgent(tmp_path, clock)
    agent._loop = asyncio.get_running_loop()
    agent.lease.reset(Lease.granted(clock.now(), 5.0, 1.0))
    clock.advance(5.0 - lease_left)
    agent._on_heartbeat(HeartbeatReply(heartbeat_seconds=1.0, reregister=True))
    for _ in range(3):  # the lapse is handed over with call_soon_threadsafe
        await asyncio.sleep(0)
    agent.store.close()
    return agent.went


def test_a_lapsed_agent_told_to_register_again_handles_the_lapse(tmp_path: Path) -> None:
    assert asyncio.run(told_to_register_again(tmp_path, lease_left=-1.0)) == ["lapse"]


def test_an_agent_with_a_live_lease_told_to_register_again_registers(tmp_path: Path) -> None:
    assert asyncio.run(told_to_register_again(tmp_path, lease_left=2.0)) == ["register"]
