"""Two-level scheduling: a fair-share layer picks the queue, the policy in force orders inside it.

`FairShare(inner)` wraps any registered policy. Without queues in the
snapshot (`ClusterView.tenancy is None`) it is the inner policy. With
queues (see `fairshare_queues` for guarantees, limits, weights, usage
decay and how a queue's fair share is computed), one pass runs:

1. Fast path: when every pending job fits in the free GPUs, no limit or
   non-preemptible rule is in play and the inner policy, on the whole
   snapshot, starts every pending job without preempting anyone, that
   is the pass (nobody waits, so nobody's share is at stake).
2. Share round: queues in order (below their guarantee first, then
   furthest below their fair share) each get one inner pass over their
   own pending and running jobs on the GPUs still free, and keep its
   decisions, in its order, while the queue stays within its fair share;
   the first decision that would take it over ends the queue's turn.
   The inner policy thus orders, packs and preempts inside the queue
   exactly as it would alone (fifo's head-of-line, tiresias's levels).
3. Reclaim: a queue below its guarantee takes GPUs back by preempting
   preemptible jobs of queues above theirs; then a queue below its fair
   share does the same from queues above their fair share. Its jobs are
   taken in the inner policy's order (`order`, else arrival order); a job
   that would take the queue over the bound, or cannot be made room for,
   is skipped. Victims: jobs of queues over the bound, queues furthest
   over first, latest started first, as few as the job needs (a victim
   queue may end below its bound: GPUs come back whole jobs at a time);
   only jobs that have run `min_run` seconds (no thrashing).
4. Lend: GPUs still idle go to queues with waiting work in order of
   decayed usage per weight (least first), one inner pass each, up to
   each queue's limit. Lent GPUs are what step 3 takes back later.
5. Reclaim for guarantees once more, since step 4 may have taken a
   queue over its guarantee: after a pass, no queue below its guarantee
   with a waiting job that fits in it is left waiting while preemptible
   jobs (run `min_run`) of queues over their guarantee could make room.
   With `min_run` 0 a start of this pass counts as such a job: the
   reclaim withdraws it (the Start is dropped, the job waits on) rather
   than leave the guaranteed job waiting.

No job is stranded: a job this pass suspends (the inner policy
preempting inside its queue in step 2 or 4, a reclaim's victim in step
3 or 5) or whose start it withdraws cannot start again in the same pass
(a job appears once in a pass). So every step that changes the pass's
state is checked before it stands: if afterwards such a job waits in a
queue below its guarantee, fits in it, and preemptible jobs (run
`min_run`) of queues over their guarantee could make room for it, the
step is undone and refused (the inner policy's group ends the queue's
turn; a reclaim's start is skipped; a reclaim's making room is tried
again without that queue's jobs as victims). E.g. srtf in a queue guaranteed 3
that holds 1 does not suspend that job for a shorter 2-GPU one; the
guarantee reclaim then starts the short one on GPUs taken from a queue
over its guarantee, and both run. Together with step 5 this keeps the
guarantee invariant in the same pass for every job, suspended or not.

Throughout: a queue never holds more than its limit, and a
non-preemptible job starts only within its queue's guarantee (the
queue's non-preemptible jobs together use at most its guaranteed GPUs),
so no one ever needs to reclaim it. A queue guaranteed only typed GPUs
(`{"v100": 4}`) reclaims for its guarantee on GPUs of those types.

Where each part lives: this module is the layer a host calls (the fast
path, the memo of a quiet pass, `order`); `fairshare_pass` runs steps 2
to 5 (the share round and lending itself), `fairshare_reclaim` steps 3
and 5, `fairshare_stranded` the victims and the no-stranded-job check,
`fairshare_state` the pass's bookkeeping and undo.

Sources: Slurm's multifactor fair share with usage decay; Kueue's
ClusterQueue nominal quota, borrowing and reclaim; NVIDIA KAI's
guaranteed quota and over-quota weight, reclaiming (unlike KAI) up to
the weighted fair share and not only the quota.
"""

from __future__ import annotations

from typing import ClassVar

from schedulearn.core.decisions import Decision, Start
from schedulearn.core.fairshare_pass import SharePass
from schedulearn.core.fairshare_queues import Tenancy, named, shares
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
        # The last full pass, when it decided nothing: (its time, what it saw).
        self._quiet: tuple[float, tuple[object, ...]] | None = None

    @property
    def uses_goodput(self) -> bool:
        """The wrapped policy reads `ClusterView.goodput`: hosts then fill it."""
        return bool(getattr(self.inner, "uses_goodput", False))

    def decide(self, view: ClusterView) -> list[Decision]:
        tenancy = view.tenancy
        if tenancy is None:
            return self.inner.decide(view)
        view = named(view)
        if not view.pending:
            # Nobody waits: only a policy that grows running jobs acts, and
            # then limits apply, so the full pass checks it.
            return self.inner.decide(view) and self._pass(view, tenancy).run()
        if self._still_quiet(view, tenancy):
            return []
        fast = self._fast(view, tenancy)
        if fast is not None:
            return fast
        decisions = self._pass(view, tenancy).run()
        quiet = not decisions and self.inner.tick_seconds is None
        self._quiet = (view.now, _seen(view, tenancy)) if quiet else None
        return decisions

    def _still_quiet(self, view: ClusterView, tenancy: Tenancy) -> bool:
        """Would a full pass decide nothing again, as the last one did?

        On a contended cluster most passes are `min_run` ticks that find
        nothing to do. With the same jobs, GPUs and queues as that pass,
        only time has moved; for an inner policy without a tick, time
        changes a pass through `min_run` alone (a job becoming a victim),
        so unless a running job crossed it since, the answer is the same.
        (Decayed usage drifts too, by a half-life of days: shares follow
        it at the next event, not at every tick.)
        """
        last = self._quiet
        if last is None or view.now < last[0] or not _same(last[1], _seen(view, tenancy)):
            return False
        since, now, min_run = last[0], view.now, self.min_run
        return not any(
            j.started_at is not None and since - EPS < j.started_at + min_run <= now + EPS
            for j in view.running
        )

    def order(self, view: ClusterView) -> QueueOrder:
        """Pending jobs: queues in share-round order, each in the inner policy's order."""
        tenancy = view.tenancy
        if tenancy is None:
            return queue_order(self.inner, view)
        view = named(view)
        return QueueOrder(
            tuple(self._pass(view, tenancy).order()),
            "queues in fair-share order (under their guarantee first), "
            "each in the order of the policy in force",
            exact=False,
        )

    def _pass(self, view: ClusterView, tenancy: Tenancy) -> SharePass:
        """A full pass over `view` (steps 2 to 5 of the module doc)."""
        return SharePass(self.inner, self.min_run, view, tenancy)

    def _fast(self, view: ClusterView, tenancy: Tenancy) -> list[Decision] | None:
        pending = view.pending
        if sum(j.gpus for j in pending) > view.free_gpus:
            return None
        if tenancy.has_limits or not all(j.preemptible for j in pending):
            book = shares(view, tenancy)
            want: dict[str, list[JobView]] = {}
            for j in pending:
                want.setdefault(j.queue, []).append(j)
            for name, jobs in want.items():
                s = book[name]
                if s.used + sum(j.gpus for j in jobs) > s.cap:
                    return None
                pinned = sum(j.gpus for j in jobs if not j.preemptible)
                if pinned and s.pinned + pinned > s.guaranteed:
                    return None
        decisions = self.inner.decide(view)
        if len(decisions) != len(pending) or not all(isinstance(d, Start) for d in decisions):
            return None
        return decisions


def _seen(view: ClusterView, tenancy: Tenancy) -> tuple[object, ...]:
    """What a pass depends on besides time: the jobs, free GPUs, the queues."""
    return (view.pending, view.running, view.free_gpus, tenancy.queues)


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    # A host that keeps its job tuples while nothing changes (the simulator)
    # makes this an identity check; rebuilt views compare field by field.
    return all(x is y or x == y for x, y in zip(a, b, strict=True))
