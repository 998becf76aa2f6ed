"""The fair-share layer's book between passes: each queue's GPUs in use and waiting.

`ShareBook` is held by one `core.fairshare.FairShare` and answers what
`fairshare_queues.named` and `fairshare_queues.sweep` answer (the view
with jobs that name no queue in the default queue; each queue's
`QueueShare` and its pending jobs by queue) for the pass at hand,
recounting the running jobs only when the snapshot's running jobs
changed and regrouping the pending jobs only when those changed. A host
that keeps its job tuples while nothing changes (the simulator; a tick
of a policy with `tick_seconds`) then pays for the counts once per
change, not once per pass. The shares themselves (`fill`) follow usage,
which moves with time, so they are filled afresh each pass (a few
queues: cheap). Only counts are kept, so the layer still decides from
the snapshot alone.

On a backlogged cluster the snapshot holds thousands of pending jobs,
and each sweep of them costs about as much as a whole pass of a plain
policy that looks only at the head of the queue. So the book sweeps
each new tuple once: that sweep groups the jobs by queue, and says
whether any names no queue (only then is the tuple rebuilt, as `named`
does); the jobs by id are indexed only when a pass asks (most passes
propose nothing).
"""

from __future__ import annotations

from dataclasses import replace
from operator import attrgetter

from schedulearn.core.fairshare_queues import (
    DEFAULT_QUEUE,
    Held,
    QueueShare,
    Tenancy,
    book,
    held_by_queue,
    pending_by_queue,
)
from schedulearn.core.views import ClusterView, JobView, rebuild

_GPUS = attrgetter("gpus")
_ID = attrgetter("id")


class ShareBook:
    """Counts per queue, kept while the snapshot's job tuples stay the same."""

    __slots__ = (
        "_by_id",
        "_by_id_of",
        "_by_queue",
        "_held",
        "_pending",
        "_raw_pending",
        "_raw_running",
        "_running",
        "_waiting",
    )

    def __init__(self) -> None:
        # The host's tuples last seen, and the same with every job in a queue
        # (the very same tuples when every job names one).
        self._raw_pending: tuple[JobView, ...] | None = None
        self._pending: tuple[JobView, ...] = ()
        self._raw_running: tuple[JobView, ...] | None = None
        self._running: tuple[JobView, ...] = ()
        # queue -> what its running jobs hold
        self._held: dict[str, Held] = {}
        self._by_queue: dict[str, list[JobView]] = {}
        # queue -> GPUs its pending jobs ask for
        self._waiting: dict[str, int] = {}
        # The pending jobs by id, and the tuple they index (built on demand).
        self._by_id: dict[int, JobView] = {}
        self._by_id_of: tuple[JobView, ...] | None = None

    def named(self, view: ClusterView) -> ClusterView:
        """`fairshare_queues.named(view)`, from the book's sweeps of the job tuples."""
        pending = self._name_pending(view.pending)
        running = self._name_running(view.running)
        if pending is view.pending and running is view.running:
            return view
        return replace(view, pending=pending, running=running)

    def shares(
        self, view: ClusterView, tenancy: Tenancy
    ) -> tuple[dict[str, QueueShare], dict[str, list[JobView]]]:
        """Every queue's share for this pass, and its pending jobs in the view's order.

        `view` is a named one (`named`): every job names its queue.
        """
        if view.running is not self._running:
            self._name_running(view.running)
        if view.pending is not self._pending:
            self._name_pending(view.pending)
        out = book(view, tenancy, self._held, self._waiting)
        # The pass reads the lists and never changes them: shared, not copied.
        return out, self._by_queue

    def pending_by_id(self) -> dict[int, JobView]:
        """The pending jobs of the last `shares` by id (read-only: the book's own)."""
        if self._by_id_of is not self._pending:
            pending = self._pending
            # map(attrgetter) and zip sweep at C speed.
            self._by_id = dict(zip(map(_ID, pending), pending, strict=True))
            self._by_id_of = pending
        return self._by_id

    def _name_pending(self, raw: tuple[JobView, ...]) -> tuple[JobView, ...]:
        if raw is self._raw_pending or raw is self._pending:
            return self._pending
        by_queue = pending_by_queue(raw)
        jobs = raw
        if "" in by_queue:
            jobs = _fix(raw)
            by_queue = pending_by_queue(jobs)
        self._by_queue = by_queue
        self._waiting = {q: sum(map(_GPUS, js)) for q, js in by_queue.items()}
        self._raw_pending, self._pending = raw, jobs
        return jobs

    def _name_running(self, raw: tuple[JobView, ...]) -> tuple[JobView, ...]:
        if raw is self._raw_running or raw is self._running:
            return self._running
        held = held_by_queue(raw)
        jobs = raw
        if "" in held:
            jobs = _fix(raw)
            held = held_by_queue(jobs)
        self._held = held
        self._raw_running, self._running = raw, jobs
        return jobs


def _fix(jobs: tuple[JobView, ...]) -> tuple[JobView, ...]:
    """`jobs` with those that name no queue in the default queue (`named`)."""
    return tuple(j if j.queue else rebuild(j, queue=DEFAULT_QUEUE) for j in jobs)
