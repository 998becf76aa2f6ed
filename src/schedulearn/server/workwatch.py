"""The waiting work polls' one read a second: work and revocations another replica wrote.

A work poll (`api.agent.take_work`) waits on its node's wake-up
(`wakeups`): this replica's scheduler passes, event reports and admin
calls set it the moment they write work for the node. What another
replica of the same PostgreSQL database writes (the leader's passes, a
cancel or a `node rm` served there) sets no event here, so each waiting
poll used to read its node's work again every second: with 1,000 agents
that was 1,000 reads a second (three queries each) while nothing
happened, a third of a core at 100 idle nodes (bench/scale.py).

`WorkWatch` does that read once a second for every waiting poll together
(`services.work_due`: which of their nodes have starts or stops not yet
sent, and which of their credentials were revoked) and wakes those polls,
which then read their work exactly as before. It owns the set of waiting
polls and the one task that reads for them, which runs only while some
poll waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from schedulearn.clock import Clock
from schedulearn.server.db import Database
from schedulearn.server.services import work_due
from schedulearn.server.wakeups import Wakeups

log = logging.getLogger(__name__)


class WorkWatch:
    """`with watch.waiting(node, digest):` around a poll's wait. Event-loop thread only."""

    def __init__(self, db: Database, wakeups: Wakeups, clock: Clock, every: float = 1.0) -> None:
        self.db = db
        self.wakeups = wakeups
        self.clock = clock
        self.every = every
        self.reads = 0  # reads done, for tests
        self._waiting: dict[tuple[str, str], int] = {}  # (node, credential hash) -> polls
        self._task: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def waiting(self, node: str, digest: str) -> Iterator[None]:
        key = (node, digest)
        self._waiting[key] = self._waiting.get(key, 0) + 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="work-watch")
        try:
            yield
        finally:
            left = self._waiting[key] - 1
            if left:
                self._waiting[key] = left
            else:
                del self._waiting[key]

    async def _watch(self) -> None:
        while self._waiting:
            await asyncio.sleep(self.every)
            if not self._waiting:
                return
            nodes = sorted({node for node, _ in self._waiting})
            digests = sorted({digest for _, digest in self._waiting})
            try:
                due, refused = await self.db.run(
                    work_due.due_nodes, nodes, digests, self.clock.now()
                )
            except Exception as exc:
                # The polls still end at their deadline, and read their work then.
                log.warning("could not read which waiting nodes have work: %r", exc)
                continue
            self.reads += 1
            due |= {node for node, digest in self._waiting if digest in refused}
            self.wakeups.wake_nodes(due)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
