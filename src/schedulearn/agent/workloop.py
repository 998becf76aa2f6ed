"""The work loop: long-poll the server for work and act on it at once.

Each poll waits up to `poll_wait_seconds` for a `WorkBatch`: a start
becomes a runner in the set of runners (`agent.runners`), a stop order is
passed to its runner in the background, so a slow stop never holds up the
next poll. Once a batch is acted on, its `at` is what heartbeats echo
(`work_through`: the server then knows they list its runs). The loop
waits while the agent is not registered; a 404 (the
server no longer knows this node) registers again, unless the lease has
lapsed: then the lapse goes first (`LeaseKeeper.check`). A refused
credential or protocol ends the loop, and the agent with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from schedulearn.agent.client import AgentClient, AuthRejected, ProtocolRefused, Rejected
from schedulearn.agent.config import AgentConfig
from schedulearn.agent.leasekeeper import LeaseKeeper
from schedulearn.agent.retry import Retry
from schedulearn.agent.runners import Background, Runners
from schedulearn.protocol import WorkBatch

log = logging.getLogger(__name__)


class WorkLoop:
    """Polls for this node's work until cancelled."""

    def __init__(
        self,
        config: AgentConfig,
        client: AgentClient,
        runners: Runners,
        lease: LeaseKeeper,
        registered: asyncio.Event,
        register: Callable[[], Awaitable[None]],
        background: Background,
    ) -> None:
        self._config = config
        self._client = client
        self._runners = runners
        self._lease = lease
        self._registered = registered
        self._register = register
        self._background = background
        # The `at` of the newest batch acted on, which heartbeats echo
        # (`Heartbeat.work_through`); read from the heartbeat's thread.
        self.work_through: float | None = None

    async def run(self) -> None:
        retry = Retry(f"get work from {self._config.server}")
        while True:
            await self._registered.wait()
            try:
                batch = await retry.run(
                    lambda: self._client.work(self._config.name, self._config.poll_wait_seconds)
                )
            except (AuthRejected, ProtocolRefused):
                raise
            except Rejected as exc:
                if exc.status == 404:
                    if not self._lease.check():
                        await self._register()
                else:
                    log.warning("the server refused a work request: %s", exc)
                    await retry.pause(exc)
                continue
            self.handle(batch)

    def handle(self, batch: WorkBatch) -> None:
        for assignment in batch.starts:
            if self._lease.lapsed:
                # Registering again says it does not run here; the server places it anew.
                log.info("lease lapsed: not starting job %s", assignment.job_id)
                continue
            self._runners.start(assignment)
        for order in batch.stops:
            self._background(self._runners.stop(order))
        # Set last: a heartbeat that reads it finds this batch's runs among the
        # runners (every run handed out up to `at` is there, or has ended).
        if batch.at is not None:
            self.work_through = batch.at
