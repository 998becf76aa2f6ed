"""Runs on their way to a report, so the event outbox can wait for them.

The event outbox (`agent.outbox`) sends what piled up while its last
request was on the way. When a start or an exit never left the agent's
loop, one work reply's starts, and the exits that followed them, queued
their reports in the same turn of the loop and went in one batch. Since
a run's cgroup is made, joined and removed on threads (cgroup v1 waits
on the kernel for milliseconds), the first report of a burst went out
alone and the rest trickled after it: two to three times as many event
batches, each a transaction and often a scheduling pass on the server
(docs/results.md 6.17).

`Settling` counts the runs in such a step: a start waiting its turn at
the start gate or in progress, a run whose cgroup is being emptied and
removed after its exit. The outbox waits until none is, or a few
milliseconds at most, before it takes a batch. A lone run's report is
not held: its own step has ended when it reports.
"""

from __future__ import annotations

import asyncio

from schedulearn.agent.waits import wait_set

# The longest the event outbox waits for runs still settling.
REPORT_HOLD_SECONDS = 0.02


class Settling:
    """`enter()` when a run begins such a step, `leave()` when it ends it."""

    def __init__(self) -> None:
        self.count = 0
        self._none = asyncio.Event()
        self._none.set()

    def enter(self) -> None:
        self.count += 1
        self._none.clear()

    def leave(self) -> None:
        self.count -= 1
        if self.count <= 0:
            self.count = 0
            self._none.set()

    async def none(self, at_most: float = REPORT_HOLD_SECONDS) -> None:
        """Return once no run is settling, or after `at_most` seconds (a paced
        array keeps starts going for long)."""
        if self.count:
            await wait_set(self._none, at_most)
