"""One fair-share pass's bookkeeping: what it has decided so far, and how to undo a step.

`PassState` owns the mutable state of one pass of `core.fairshare.FairShare`
(see that module's doc for the steps): the free pool and the node views
kept in step with it, each queue's share (`QueueShare.used`, `pinned`),
the pending and running jobs by queue, the starts, preemptions and
withdrawn starts so far, and the decisions. A step that turns out to
break a rule is undone with `_save` / `_restore`. The steps themselves
live in `fairshare_pass` (share round, lending), `fairshare_reclaim`
(taking GPUs back) and `fairshare_stranded` (who may be preempted, and
the rule that no job is stranded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schedulearn.core.decisions import Decision, Start
from schedulearn.core.fairshare_queues import QueueShare, Tenancy, shares
from schedulearn.core.placement import FreePool
from schedulearn.core.policy import Policy
from schedulearn.core.views import ClusterView, GpuView, JobView, NodeView, Placement, rebuild

# Tolerance for comparing GPU counts with fractional shares.
EPS = 1e-9


class PassState:
    """One slow pass: the pool, each queue's share and jobs, and the decisions so far."""

    def __init__(self, inner: Policy, min_run: float, view: ClusterView, tenancy: Tenancy) -> None:
        # Decayed usage, read once: a host's live mapping settles on every read.
        tenancy = Tenancy(tenancy.queues, dict(tenancy.usage), tenancy.half_life)
        self.inner = inner
        self.min_run = min_run
        self.view = view
        self.tenancy = tenancy
        self.book = shares(view, tenancy)
        self.pool = FreePool(view)
        self.free = self.pool.total_free()
        self.nodes = list(view.nodes)
        self.counts = list(view.free_counts) if view.free_counts is not None else None
        self.index = {n.name: i for i, n in enumerate(view.nodes)}
        self.pending: dict[str, list[JobView]] = {}
        for j in view.pending:
            self.pending.setdefault(j.queue, []).append(j)
        # Pending jobs per queue this pass may still start (`_waiting`, asked often).
        self.open_count = {q: len(js) for q, js in self.pending.items()}
        self.running: dict[int, JobView] = {j.id: j for j in view.running}
        # Running jobs by queue (ids; `running` holds the current view of each):
        # a queue's sub-view reads only its own, not every running job.
        self.running_in: dict[str, list[int]] = {}
        for j in view.running:
            self.running_in.setdefault(j.queue, []).append(j.id)
        self.started: set[int] = set()
        # Same-pass starts, placed: with min_run 0 a later reclaim may take
        # them back (the Start is withdrawn), like any job that ran min_run.
        self.fresh: dict[int, JobView] = {}
        self.withdrawn: set[int] = set()
        self.stopped: set[int] = set()
        # Jobs this pass put (back) in the waiting line, preempted or a start
        # withdrawn: no later step may start them again (a job appears once
        # in a pass), so no step may leave one stranded (`_stranded`).
        self.again: dict[int, JobView] = {}
        self.decisions: list[Decision] = []

    # --- queues and their jobs ---------------------------------------------

    def _share_order(self) -> list[QueueShare]:
        def key(s: QueueShare) -> tuple[int, float, str]:
            below = s.used < s.guaranteed
            if below:
                return (0, s.used / s.guaranteed, s.name)
            return (1, s.used / s.share if s.share > EPS else float("inf"), s.name)

        return sorted(self.book.values(), key=key)

    def _lend_key(self, s: QueueShare) -> tuple[float, int, str]:
        return (self.tenancy.usage.get(s.name, 0.0) / s.queue.weight, s.used, s.name)

    def _waiting(self, queue: str) -> bool:
        return self.open_count.get(queue, 0) > 0

    def _open(self, job_id: int) -> bool:
        """A pending job this pass may still start (a withdrawn start stays out)."""
        return job_id not in self.started and job_id not in self.withdrawn

    def _sub_view(self, queue: str) -> ClusterView:
        view = self.view
        pending = tuple(j for j in self.pending.get(queue, ()) if self._open(j.id))
        stopped, current = self.stopped, self.running
        running = tuple(current[i] for i in self.running_in.get(queue, ()) if i not in stopped)
        counts = tuple(self.counts) if self.counts is not None else None
        return ClusterView(
            view.now, tuple(self.nodes), pending, running, counts, view.goodput, None
        )

    def _pending_job(self, queue: str, job_id: int) -> JobView | None:
        if not self._open(job_id):
            return None
        return next((j for j in self.pending.get(queue, ()) if j.id == job_id), None)

    # --- recording starts ------------------------------------------------------

    def _started(self, s: QueueShare, job: JobView, placement: Placement) -> None:
        if job.id not in self.withdrawn:
            self.open_count[job.queue] -= 1
        self.started.add(job.id)
        self.fresh[job.id] = rebuild(job, placement=placement, started_at=self.view.now)
        s.used += placement.num_gpus
        if not job.preemptible:
            s.pinned += placement.num_gpus

    def _withdraw(self, job: JobView) -> None:
        """Take back a start of this pass (its GPUs are already released):
        the job waits on. A preemption the inner policy decided in its
        queue to make room for it stands (still a valid decision; rare, as
        only a queue's own turn preempts its own jobs)."""
        del self.fresh[job.id]
        self.started.discard(job.id)
        self.withdrawn.add(job.id)
        self.again[job.id] = rebuild(job, placement=None, started_at=None)
        self.decisions = [
            d for d in self.decisions if not (isinstance(d, Start) and d.job_id == job.id)
        ]

    # --- undoing a step ----------------------------------------------------------

    def _save(self) -> _Saved:
        book = self.book
        return _Saved(
            list(self.decisions),
            set(self.started),
            dict(self.fresh),
            set(self.withdrawn),
            set(self.stopped),
            dict(self.again),
            dict(self.open_count),
            {name: (b.used, b.pinned) for name, b in book.items()},
            self.free,
        )

    def _restore(
        self,
        saved: _Saved,
        taken: Sequence[tuple[JobView, Placement]],
        released: Sequence[JobView],
    ) -> None:
        """Undo one step: give back what it took, take back what it released."""
        pool = self.pool
        for job, placement in reversed(taken):
            pool.release(job, placement)
            self._mark(job, placement, None)
        for job in released:
            assert job.placement is not None
            pool.take(job, job.placement)
            self._mark(job, job.placement, job.id)
            if job.id in self.running:  # a resize's old view (a same-pass start is in `fresh`)
                self.running[job.id] = job
        self.decisions = saved.decisions
        self.started = saved.started
        self.fresh = saved.fresh
        self.withdrawn = saved.withdrawn
        self.stopped = saved.stopped
        self.again = saved.again
        self.open_count = saved.open_count
        for name, (used, pinned) in saved.shares.items():
            b = self.book[name]
            b.used, b.pinned = used, pinned
        self.free = saved.free

    # --- the pool and the node views, kept together --------------------------

    def _take(self, job: JobView, placement: Placement) -> None:
        self.pool.take(job, placement)
        self._mark(job, placement, job.id)
        self.free -= placement.num_gpus

    def _release(self, job: JobView) -> None:
        assert job.placement is not None
        self.pool.release(job)
        self._mark(job, job.placement, None)
        self.free += job.placement.num_gpus

    def _mark(self, job: JobView, placement: Placement, holder: int | None) -> None:
        """Rebuild the views of the nodes `placement` touches: its GPUs now
        belong to `holder` (None: free), CPUs and memory as the pool has them."""
        pool = self.pool
        for name, indices in placement:
            i = self.index[name]
            node = self.nodes[i]
            mine = set(indices)
            gpus = tuple(
                GpuView(g.index, g.type, g.uuid, g.memory_mb, holder)
                if g.index in mine and g.job_id != holder
                else g
                for g in node.gpus
            )
            self.nodes[i] = NodeView(
                node.name,
                gpus,
                node.cpus,
                node.memory_gb,
                pool.free_cpus(node),
                pool.free_memory_gb(node),
                node.healthy,
            )
            if self.counts is not None:
                self.counts[i] = self.nodes[i].num_free_gpus


@dataclass(frozen=True, slots=True)
class _Saved:
    """A pass's bookkeeping before one step, to undo it (`PassState._restore`)."""

    decisions: list[Decision]
    started: set[int]
    fresh: dict[int, JobView]
    withdrawn: set[int]
    stopped: set[int]
    again: dict[int, JobView]
    open_count: dict[str, int]
    shares: dict[str, tuple[int, int]]
    free: int
