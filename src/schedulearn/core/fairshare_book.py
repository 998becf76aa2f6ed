"""The fair-share layer's book between passes: each queue's GPUs in use and waiting.

`ShareBook` is held by one `core.fairshare.FairShare` and answers what
`fairshare_queues.sweep` answers (each queue's `QueueShare` and its
pending jobs by queue) for the pass at hand, recounting the running jobs
only when the snapshot's running jobs changed and regrouping the pending
jobs (and indexing them by id) only when those changed. A host that keeps
its job tuples while nothing changes (the simulator; a tick of a policy
with `tick_seconds`) then pays for the counts once per change, not once
per pass. The shares
themselves (`fill`) follow usage, which moves with time, so they are
filled afresh each pass (a few queues: cheap). Only counts are kept, so
the layer still decides from the snapshot alone.
"""

from __future__ import annotations

from operator import attrgetter

from schedulearn.core.fairshare_queues import (
    QueueShare,
    Tenancy,
    book,
    held_by_queue,
    pending_by_queue,
)
from schedulearn.core.views import ClusterView, JobView

_GPUS = attrgetter("gpus")
_ID = attrgetter("id")


class ShareBook:
    """Counts per queue, kept while the snapshot's job tuples stay the same."""

    __slots__ = ("_by_id", "_by_queue", "_held", "_pending", "_running", "_waiting")

    def __init__(self) -> None:
        self._running: tuple[JobView, ...] | None = None
        self._pending: tuple[JobView, ...] | None = None
        # queue -> (GPUs held, of them by non-preemptible jobs)
        self._held: dict[str, tuple[int, int]] = {}
        self._by_queue: dict[str, list[JobView]] = {}
        self._by_id: dict[int, JobView] = {}
        # queue -> GPUs its pending jobs ask for
        self._waiting: dict[str, int] = {}

    def shares(
        self, view: ClusterView, tenancy: Tenancy
    ) -> tuple[dict[str, QueueShare], dict[str, list[JobView]]]:
        """Every queue's share for this pass, and its pending jobs in the view's order."""
        if view.running is not self._running:
            self._held = held_by_queue(view.running)
            self._running = view.running
        if view.pending is not self._pending:
            self._by_queue = pending_by_queue(view.pending)
            # map(attrgetter) and zip sweep at C speed: this runs on every change.
            self._waiting = {q: sum(map(_GPUS, js)) for q, js in self._by_queue.items()}
            self._by_id = dict(zip(map(_ID, view.pending), view.pending, strict=True))
            self._pending = view.pending
        out = book(view, tenancy, self._held, self._waiting)
        # The pass reads the lists and never changes them: shared, not copied.
        return out, self._by_queue

    def pending_by_id(self) -> dict[int, JobView]:
        """The pending jobs of the last `shares` by id (read-only: the book's own)."""
        return self._by_id
