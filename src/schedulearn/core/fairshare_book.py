"""The fair-share layer's book between passes: each queue's GPUs in use and waiting.

`ShareBook` is held by one `core.fairshare.FairShare` and answers what
`fairshare_queues.sweep` answers (each queue's `QueueShare` and its
pending jobs by queue) for the pass at hand, recounting the running jobs
only when the snapshot's running jobs changed and regrouping the pending
jobs only when those changed. A host that keeps its job tuples while
nothing changes (the simulator; a tick of a policy with `tick_seconds`)
then pays for the counts once per change, not once per pass. The shares
themselves (`fill`) follow usage, which moves with time, so they are
filled afresh each pass (a few queues: cheap). Only counts are kept, so
the layer still decides from the snapshot alone.
"""

from __future__ import annotations

from schedulearn.core.fairshare_queues import QueueShare, Tenancy, fill
from schedulearn.core.views import ClusterView, JobView


class ShareBook:
    """Counts per queue, kept while the snapshot's job tuples stay the same."""

    __slots__ = ("_by_queue", "_held", "_pending", "_running", "_waiting")

    def __init__(self) -> None:
        self._running: tuple[JobView, ...] | None = None
        self._pending: tuple[JobView, ...] | None = None
        # queue -> (GPUs held, of them by non-preemptible jobs)
        self._held: dict[str, tuple[int, int]] = {}
        self._by_queue: dict[str, list[JobView]] = {}
        # queue -> GPUs its pending jobs ask for
        self._waiting: dict[str, int] = {}

    def shares(
        self, view: ClusterView, tenancy: Tenancy
    ) -> tuple[dict[str, QueueShare], dict[str, list[JobView]]]:
        """Every queue's share for this pass, and its pending jobs in the view's order."""
        if view.running is not self._running:
            held: dict[str, list[int]] = {}
            for job in view.running:
                mine = held.get(job.queue)
                if mine is None:
                    mine = held[job.queue] = [0, 0]
                n = job.allocated_gpus
                mine[0] += n
                if not job.preemptible:
                    mine[1] += n
            self._held = {q: (a, b) for q, (a, b) in held.items()}
            self._running = view.running
        if view.pending is not self._pending:
            by_queue: dict[str, list[JobView]] = {}
            for job in view.pending:
                mine_p = by_queue.get(job.queue)
                if mine_p is None:
                    mine_p = by_queue[job.queue] = []
                mine_p.append(job)
            self._by_queue = by_queue
            self._waiting = {q: sum(j.gpus for j in js) for q, js in by_queue.items()}
            self._pending = view.pending
        out: dict[str, QueueShare] = {q.name: QueueShare(q) for q in tenancy.queues}
        for name, (used, pinned) in self._held.items():
            s = out.get(name)
            if s is None:
                s = out[name] = QueueShare(tenancy.queue(name))
            s.used, s.pinned = used, pinned
        for name, gpus in self._waiting.items():
            s = out.get(name)
            if s is None:
                s = out[name] = QueueShare(tenancy.queue(name))
            s.pending = gpus
        fill(out.values(), view.total_gpus, tenancy.usage)
        # The pass reads the lists and never changes them: shared, not copied.
        return out, self._by_queue
