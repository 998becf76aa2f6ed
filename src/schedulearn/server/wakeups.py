"""In-process wake-up signals (asyncio events), so nothing polls with sleeps.

Owns three kinds of signal: the scheduler's (a submission, an exit, a
node joining or leaving, a policy switch), one per node (work for its
agent's long-poll) and one per job (new log lines or a state change, for
`logs --follow`). Services return what changed; the API layer calls
`notify` on the event loop after the transaction has committed, so a
woken reader always finds the committed rows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


@dataclass(slots=True)
class Changes:
    """What a service call changed, for the wake-ups it should cause."""

    scheduler: bool = False
    nodes: set[str] = field(default_factory=set)
    jobs: set[int] = field(default_factory=set)

    def merge(self, other: Changes) -> Changes:
        self.scheduler |= other.scheduler
        self.nodes |= other.nodes
        self.jobs |= other.jobs
        return self


class Wakeups:
    """The app's events. Use only from the event loop's thread."""

    def __init__(self) -> None:
        self.scheduler = asyncio.Event()
        self._nodes: dict[str, asyncio.Event] = {}
        self._jobs: dict[int, list[asyncio.Event]] = {}

    def notify(self, changes: Changes) -> None:
        if changes.scheduler:
            self.scheduler.set()
        for name in changes.nodes:
            self.node(name).set()
        for job_id in changes.jobs:
            for ev in self._jobs.get(job_id, ()):
                ev.set()

    def wake_scheduler(self) -> None:
        self.scheduler.set()

    def node(self, name: str) -> asyncio.Event:
        ev = self._nodes.get(name)
        if ev is None:
            ev = self._nodes[name] = asyncio.Event()
        return ev

    def wake_nodes(self, names: Iterable[str]) -> None:
        for name in names:
            self.node(name).set()

    @contextlib.contextmanager
    def watch_job(self, job_id: int) -> Iterator[asyncio.Event]:
        """An event set whenever job `job_id` gets logs or changes state."""
        ev = asyncio.Event()
        self._jobs.setdefault(job_id, []).append(ev)
        try:
            yield ev
        finally:
            watchers = self._jobs.get(job_id, [])
            if ev in watchers:
                watchers.remove(ev)
            if not watchers:
                self._jobs.pop(job_id, None)


async def wait_for(event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` passes; clear it; True if it was set."""
    if not event.is_set():
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for starts a task
        # for each wait (every work poll and every scheduler loop turn).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
    was_set = event.is_set()
    event.clear()
    return was_set
