"""Two-level scheduling: a fair-share layer over the policy in force.

`FairShare(inner)` wraps any registered policy. Without queues in the
snapshot (`ClusterView.tenancy is None`) it is the inner policy. With
queues (`fairshare_queues`: guarantees, limits, weights, usage decay),
each queue has a **deserved share**: its guarantee (up to its demand)
plus a weighted part of the GPUs no other guarantee needs, water-filled
over the queues that want more (Kueue's nominal quota and borrowing,
KAI's deserved quota and over-quota weight). The default queue (jobs
that name no queue) is guaranteed the GPUs no declared guarantee covers.
One pass:

0. Fast path: when every pending job fits in the free GPUs within its
   queue's limit and the inner policy, on the whole snapshot, starts
   every one without preempting anyone, that is the pass.
1. Reclaim (`fairshare_reclaim`): a queue below its guarantee starts its
   waiting jobs that fit in the guarantee, in the inner policy's order,
   on free GPUs or by preempting jobs of queues over their deserved
   share (preemptible ones first, latest started first, only after
   `min_run` seconds, never taking a queue below its own guarantee).
2. Entitled turn: the inner policy decides on the whole cluster with
   only the waiting jobs of queues below their deserved share. Its
   starts are kept, in its order, while the job's queue is still below
   its share before the start (a queue may end one job over it, or a
   queue whose jobs are larger than its share would never start one).
3. Borrow turn: the inner policy decides again with every waiting job;
   its starts are kept up to each queue's limit: idle GPUs are lent to
   whoever the inner policy would run next.
4. Reclaim again, while a queue below its guarantee still waits, when
   the turns freed GPUs (an inner preemption) or took a queue past its
   deserved share; the reclaim itself goes round again when one of its
   starts takes a queue past its share (its borrowed GPUs are then
   takeable), so this pass, not the next event, does it.

A turn whose start the rules refuse is run once more without that
queue if GPUs are free (the inner policy had planned them for it).
The inner policy's own preemptions stand within one queue (it orders
the queue's own jobs, e.g. tiresias's least attained service first) as
long as a queue below its guarantee does not lose GPUs by them, and
across queues from a queue over its deserved share whose job has run
`min_run`, never below that queue's guarantee (for a queue below its
share in the entitled turn; among borrowers in the borrow turn). A job
an inner preemption suspends waits for a later pass. Jobs it may not
preempt are shown to it as non-preemptible, so it plans with what it
may do. Every start is a
whole group with what was preempted or resized for it, checked before
it is recorded, so no GPU is ever given twice.

A guarantee is kept over time, not at every instant (docs/queues.md): a
queue that is not behind, one that has had at least 80% of its
guaranteed fraction of the GPU-time used lately and 75% of the GPU-time
it was owed (decayed usage, `Tenancy.owed`, `QueueShare.ahead`), lends
what it holds like a borrower: it does not reclaim, no idle GPU is held
for it, and the inner policy may preempt its jobs once they ran
`min_run` (so tiresias's and srtf's short jobs go first across queues,
and a team interrupted is behind afterwards), unless without them it
would be behind within `LEND_FOR` times `min_run` (`PassState.lends`: it
would reclaim them at once); to a job expected to end within `min_run`
(`PassState.brief`) it lends all the same, as that job is done before
its GPUs could be taken back. Only a queue behind keeps the rules above,
save against a brief job that can run on borrowed GPUs only (larger than
its queue's guarantee, or of a queue guaranteed none: `fairshare_fill.stranded`),
which may take its jobs that ran `min_run`: no guarantee ever holds GPUs
for such a job, and it ends before a reclaim could take them back.

Jobs that name no queue keep running once queues exist (docs/queues.md):
the default queue owns the uncovered GPUs, and any job, preemptible or
not, may borrow idle GPUs beyond its queue's guarantee. When a lender
reclaims them, a non-preemptible borrower is requeued and restarts
(`Preempt.reclaimed_by` names the lender), as Kueue does.
`fairshare_reasons` says why a job waits and whether it can ever start.

Cost: the layer's book (`fairshare_queues.shares`) is kept up to date
incrementally between passes (`fairshare_book`, `fairshare_backlog`:
only the jobs that came or went since the last snapshot are counted;
the shares, which follow usage and so time, are filled afresh), two
inner turns at most, and a pass that decided
nothing is remembered until the jobs, GPUs or `min_run` deadlines
change, or the inner policy's choice can change with time, or a queue
turns ahead or behind or starts or stops lending (`steady_until`;
`_still_quiet`; `fairshare_lend`). A host that skips ticks asks the layer
the same (`FairShare.steady_until`). The inner policy is asked about
parts of the snapshot (one queue's jobs, the entitled queues', everyone
left): tiresias and srtf keep their order of the whole snapshot across
passes and answer a part by filtering it (`tiresias_waiting`,
`srtf_ranks`), so the turns do not rank the backlog anew each time.

Sources: Kueue's ClusterQueue nominal quota, cohort borrowing and
reclaim within the cohort; NVIDIA KAI's deserved quota, over-quota
weight and reclaim; Slurm's fair-share factor for usage decay.
"""

from __future__ import annotations

import math
from typing import ClassVar

from schedulearn.core.decisions import Decision, Start
from schedulearn.core.fairshare_book import ShareBook
from schedulearn.core.fairshare_fill import next_turn
from schedulearn.core.fairshare_lend import next_lend_turn
from schedulearn.core.fairshare_pass import SharePass
from schedulearn.core.fairshare_queues import Tenancy, own_guarantee
from schedulearn.core.fairshare_state import EPS
from schedulearn.core.policy import Policy, QueueOrder, queue_order
from schedulearn.core.views import ClusterView, JobView


class FairShare:
    """The fair-share layer around `inner` (any policy object); see the module doc."""

    name: ClassVar[str] = "fairshare"
    # Per instance (the inner policy's tick, or `min_run`): set in __init__.
    tick_seconds: ClassVar[float | None] = None

    def __init__(self, inner: Policy, min_run: float = 300.0) -> None:
        if min_run < 0:
            raise ValueError(f"fairshare: min_run must be 0 or more seconds, not {min_run}")
        self.inner = inner
        self.min_run = float(min_run)
        # A reclaim held back by `min_run` must be retried when the time is up,
        # even if nothing else happens: tick at least that often.
        inner_tick = inner.tick_seconds
        own = self.min_run if self.min_run > 0 else None
        ticks = [t for t in (inner_tick, own) if t is not None]
        # An instance value shadows the class one (setattr: mypy reads ClassVar).
        setattr(self, "tick_seconds", min(ticks) if ticks else None)  # noqa: B010
        # The last full pass, when it decided nothing: (its time, what it saw,
        # when a running job next crosses `min_run`).
        self._quiet: tuple[float, tuple[object, ...], float] | None = None
        # Running jobs shown to the inner policy as non-preemptible (`SharePass`).
        self._pinned: dict[int, tuple[JobView, JobView]] = {}
        # Each queue's counts, recounted only when the snapshot's jobs change.
        self._book = ShareBook(self.min_run)

    @property
    def uses_goodput(self) -> bool:
        """The wrapped policy reads `ClusterView.goodput`: hosts then fill it."""
        return bool(getattr(self.inner, "uses_goodput", False))

    def decide(self, view: ClusterView) -> list[Decision]:
        tenancy = view.tenancy
        if tenancy is None:
            return self.inner.decide(view)
        if not view.pending:
            # Nobody waits: only a policy that grows running jobs acts, and
            # then limits apply, so the full pass checks it.
            return self.inner.decide(view) and self._pass(self._book.named(view), tenancy).run()
        if self._still_quiet(view, tenancy):
            return []
        seen = _seen(view, tenancy)
        view = self._book.named(view)
        fast = self._fast(view, tenancy)
        if fast is not None:
            return fast
        full = self._pass(view, tenancy)
        decisions = full.run()
        until = view.now
        if not decisions:
            until = self._steady_until(view, full)
        self._quiet = (view.now, seen, until) if until > view.now + EPS else None
        return decisions

    def _steady_until(self, view: ClusterView, full: SharePass) -> float:
        """Until when a pass over `view` that decided nothing (`full`) would again.

        Time alone changes a pass through `min_run` (a job becoming a
        victim), through the inner policy (one without a tick never
        changes by time alone; one with a tick says until when it stays
        the same, `steady_until`, e.g. tiresias's next threshold, or is
        asked again every tick), and through each queue's decayed use: a
        queue turns ahead or behind (`_next_turn`), or a queue ahead
        starts or stops lending GPUs it would soon take back
        (`fairshare_lend`: without it a replay that skips quiet ticks
        started tiresias's preemption of a lender's jobs 6,230 s late).
        """
        now = view.now
        until = self._next_victim(view)
        if self.inner.tick_seconds is not None:
            until = min(until, self._inner_steady(view))
        until = min(until, now + _next_turn(view, full))
        if until > now + EPS:  # not asked when the pass is not remembered anyway
            until = min(until, now + next_lend_turn(full))
        return until

    def _inner_steady(self, view: ClusterView) -> float:
        """The inner policy's `steady_until`, or now for one that does not say."""
        steady = getattr(self.inner, "steady_until", None)
        return float(steady(view)) if callable(steady) else view.now

    def steady_until(self, view: ClusterView) -> float:
        """Until when a pass over `view` decides what the last one did (nothing).

        For a host that skips ticks (the simulator): the inner policy's
        answer without queues, else the quiet pass's bound (`_steady_until`).
        """
        tenancy = view.tenancy
        if tenancy is None:
            return self._inner_steady(view)
        if not view.pending:
            # Nobody waits: the pass is the inner policy's (`decide`), and no
            # `min_run` deadline can matter until a job arrives (an event).
            return self._inner_steady(view) if self.inner.tick_seconds is not None else math.inf
        last = self._quiet
        return last[2] if last is not None and self._still_quiet(view, tenancy) else view.now

    def _still_quiet(self, view: ClusterView, tenancy: Tenancy) -> bool:
        """Would a full pass decide nothing again, as the last one did?

        On a contended cluster most passes are ticks that find nothing
        to do. With the same jobs, GPUs and queues as that pass, only
        time has moved, and until `_steady_until` the answer is the same.
        (Decayed usage drifts too, by a half-life of days: shares follow
        it at the next event, not at every tick.)
        """
        last = self._quiet
        if last is None or view.now < last[0] or view.now + EPS >= last[2]:
            return False
        return _same(last[1], _seen(view, tenancy))

    def _next_victim(self, view: ClusterView) -> float:
        """When the first running job that has not yet run `min_run` will have."""
        now, min_run = view.now, self.min_run
        ends = [
            j.started_at + min_run
            for j in view.running
            if j.started_at is not None and j.started_at + min_run > now + EPS
        ]
        return min(ends, default=float("inf"))

    def order(self, view: ClusterView) -> QueueOrder:
        """Pending jobs: queues in share-round order, each in the inner policy's order."""
        tenancy = view.tenancy
        if tenancy is None:
            return queue_order(self.inner, view)
        view = self._book.named(view)
        return QueueOrder(
            tuple(self._pass(view, tenancy).order()),
            "jobs of queues below their deserved share first, "
            "each part in the order of the policy in force",
            exact=False,
        )

    def _pass(self, view: ClusterView, tenancy: Tenancy) -> SharePass:
        """A full pass over `view` (steps 1 to 3 of the module doc)."""
        pinned = self._pinned
        if len(pinned) > 2 * len(view.running) + 64:  # forget jobs that ended
            running = {j.id for j in view.running}
            for job_id in [i for i in pinned if i not in running]:
                del pinned[job_id]
        return SharePass(self.inner, self.min_run, view, tenancy, pinned, self._book)

    def _fast(self, view: ClusterView, tenancy: Tenancy) -> list[Decision] | None:
        pending = view.pending
        free = view.free_gpus
        for j in pending:  # stops at the first job past the free GPUs
            free -= j.gpus
            if free < 0:
                return None
        if tenancy.has_limits:
            book, _ = self._book.shares(view, tenancy)
            want: dict[str, int] = {}
            for j in pending:
                want[j.queue] = want.get(j.queue, 0) + j.gpus
            if any(book[name].used + n > book[name].cap for name, n in want.items()):
                return None
        decisions = self.inner.decide(view)
        if len(decisions) != len(pending) or not all(isinstance(d, Start) for d in decisions):
            return None
        return decisions


def _next_turn(view: ClusterView, full: SharePass) -> float:
    """Seconds until a queue turns ahead or behind with the jobs running now
    (`fairshare_fill.next_turn`): a pass then may decide differently."""
    tenancy, capacity = full.tenancy, full.capacity
    busy: dict[str, int] = {}
    if not full.decisions:
        # The pass changed nothing: its book counts the running jobs that fit
        # their queue's own guarantee (`QueueShare.fitting`, `fits_guarantee`).
        busy = {s.name: s.fitting for s in full.book.values() if s.used}
    else:
        own: dict[str, int] = {}  # `fits_guarantee`, its guarantee asked once a queue
        for job in view.running:
            name = job.queue
            mine = own.get(name)
            if mine is None:
                mine = own[name] = own_guarantee(tenancy, name, capacity)
            if mine == 0 or job.gpus <= mine:
                busy[name] = busy.get(name, 0) + job.allocated_gpus
    return next_turn(
        full.book.values(),
        capacity,
        tenancy.counted,
        busy,
        tenancy.half_life,
        tenancy.owed,
        full.owing,
    )


def _seen(view: ClusterView, tenancy: Tenancy) -> tuple[object, ...]:
    """What a pass depends on besides time: the jobs, free GPUs, the queues."""
    return (view.pending, view.running, view.free_gpus, tenancy.queues)


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    # A host that keeps its job tuples while nothing changes (the simulator)
    # makes this an identity check; rebuilt views compare field by field.
    return all(x is y or x == y for x, y in zip(a, b, strict=True))
