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

Sources: Slurm's multifactor fair share with usage decay; Kueue's
ClusterQueue nominal quota, borrowing and reclaim; NVIDIA KAI's
guaranteed quota and over-quota weight, reclaiming (unlike KAI) up to
the weighted fair share and not only the quota.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from schedulearn.core.decisions import Decision, Preempt, Resize, Start
from schedulearn.core.fairshare_queues import QueueShare, Tenancy, named, shares
from schedulearn.core.placement import FreePool
from schedulearn.core.policy import Policy, QueueOrder, queue_order
from schedulearn.core.preemption import make_room
from schedulearn.core.views import ClusterView, GpuView, JobView, NodeView, Placement, rebuild

_EPS = 1e-9


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
            return self.inner.decide(view) and _Pass(self, view, tenancy).run()
        if self._still_quiet(view, tenancy):
            return []
        fast = self._fast(view, tenancy)
        if fast is not None:
            return fast
        decisions = _Pass(self, view, tenancy).run()
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
            j.started_at is not None and since - _EPS < j.started_at + min_run <= now + _EPS
            for j in view.running
        )

    def order(self, view: ClusterView) -> QueueOrder:
        """Pending jobs: queues in share-round order, each in the inner policy's order."""
        tenancy = view.tenancy
        if tenancy is None:
            return queue_order(self.inner, view)
        view = named(view)
        return QueueOrder(
            tuple(_Pass(self, view, tenancy).order()),
            "queues in fair-share order (under their guarantee first), "
            "each in the order of the policy in force",
            exact=False,
        )

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


def inner_order(policy: object, view: ClusterView) -> Sequence[JobView]:
    """The order `policy` considers `view.pending` in (`core.policy.queue_order`)."""
    return queue_order(policy, view).jobs


class _Pass:
    """One slow pass: the pool, each queue's share and jobs, and the decisions so far."""

    def __init__(self, policy: FairShare, view: ClusterView, tenancy: Tenancy) -> None:
        # Decayed usage, read once: a host's live mapping settles on every read.
        tenancy = Tenancy(tenancy.queues, dict(tenancy.usage), tenancy.half_life)
        self.policy = policy
        self.inner = policy.inner
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

    # --- the pass ----------------------------------------------------------

    def run(self) -> list[Decision]:
        book = self.book
        for s in self._share_order():
            if self._waiting(s.name):
                self._turn(s, int(s.share + _EPS) - s.used)
        self._reclaim(guarantee=True)
        self._reclaim(guarantee=False)
        for s in sorted(book.values(), key=self._lend_key):
            if self.free <= 0:
                break
            if self._waiting(s.name):
                self._turn(s, s.cap - s.used)
        self._reclaim(guarantee=True)
        return self.decisions

    def order(self) -> list[JobView]:
        out: list[JobView] = []
        for s in self._share_order():
            if self.pending.get(s.name):
                out.extend(inner_order(self.inner, self._sub_view(s.name)))
        return out

    def _share_order(self) -> list[QueueShare]:
        def key(s: QueueShare) -> tuple[int, float, str]:
            below = s.used < s.guaranteed
            if below:
                return (0, s.used / s.guaranteed, s.name)
            return (1, s.used / s.share if s.share > _EPS else float("inf"), s.name)

        return sorted(self.book.values(), key=key)

    def _lend_key(self, s: QueueShare) -> tuple[float, int, str]:
        return (self.tenancy.usage.get(s.name, 0.0) / s.queue.weight, s.used, s.name)

    def _waiting(self, queue: str) -> bool:
        return self.open_count.get(queue, 0) > 0

    def _open(self, job_id: int) -> bool:
        """A pending job this pass may still start (a withdrawn start stays out)."""
        return job_id not in self.started and job_id not in self.withdrawn

    # --- one queue's turn with the inner policy ----------------------------

    def _sub_view(self, queue: str) -> ClusterView:
        view = self.view
        pending = tuple(j for j in self.pending.get(queue, ()) if self._open(j.id))
        stopped, current = self.stopped, self.running
        running = tuple(current[i] for i in self.running_in.get(queue, ()) if i not in stopped)
        counts = tuple(self.counts) if self.counts is not None else None
        return ClusterView(
            view.now, tuple(self.nodes), pending, running, counts, view.goodput, None
        )

    def _turn(self, s: QueueShare, allowance: int) -> None:
        """One inner pass for queue `s`; keep its decisions while they fit `allowance`."""
        if allowance <= 0 or self.free <= 0:
            return
        sub = self._sub_view(s.name)
        if not sub.pending:
            return
        for group in _groups(self.inner.decide(sub)):
            if not self._accept(s, group, allowance):
                return
            allowance -= sum(self._delta(d) for d in group)

    def _pending_job(self, queue: str, job_id: int) -> JobView | None:
        if not self._open(job_id):
            return None
        return next((j for j in self.pending.get(queue, ()) if j.id == job_id), None)

    def _delta(self, d: Decision) -> int:
        if isinstance(d, Start):
            return d.placement.num_gpus
        old = self.running[d.job_id].allocated_gpus
        if isinstance(d, Preempt):
            return -old
        return d.placement.num_gpus - old

    def _accept(self, s: QueueShare, group: list[Decision], allowance: int) -> bool:
        delta = sum(self._delta(d) for d in group)
        if delta > allowance or s.used + delta > s.cap:
            return False
        pinned = 0  # GPUs the group's non-preemptible starts add
        for d in group:
            if isinstance(d, Start):
                pend = self._pending_job(s.name, d.job_id)
                if pend is None:
                    return False
                if not pend.preemptible:
                    pinned += d.placement.num_gpus
            else:
                job = self.running.get(d.job_id)
                if job is None or job.queue != s.name or d.job_id in self.stopped:
                    return False
        if pinned and s.pinned + pinned > s.guaranteed:
            return False
        risky = bool(self.again) or any(isinstance(d, Preempt) for d in group)
        saved = self._save() if risky else None
        # Releases first, then check that every acquisition is free.
        released: list[JobView] = []
        for d in group:
            if isinstance(d, Preempt | Resize):
                victim = self.running[d.job_id]
                self._release(victim)
                released.append(victim)
        ok = all(_free_in(self.pool, d.placement) for d in group if isinstance(d, Start | Resize))
        if not ok:
            for victim in reversed(released):
                assert victim.placement is not None
                self._take(victim, victim.placement)
            return False
        taken: list[tuple[JobView, Placement]] = []
        for d in group:
            if isinstance(d, Start):
                pend = self._pending_job(s.name, d.job_id)
                assert pend is not None
                self._take(pend, d.placement)
                taken.append((pend, d.placement))
                self._started(s, pend, d.placement)
            elif isinstance(d, Preempt):
                victim = self.running[d.job_id]
                self.stopped.add(d.job_id)
                self.again[d.job_id] = victim
                s.used -= victim.allocated_gpus
                if not victim.preemptible:  # pragma: no cover - the ledger refuses it anyway
                    s.pinned -= victim.allocated_gpus
            else:
                old = self.running[d.job_id]
                moved = rebuild(old, placement=d.placement)
                self._take(moved, d.placement)
                taken.append((moved, d.placement))
                self.running[d.job_id] = moved
                s.used += d.placement.num_gpus - old.allocated_gpus
        if saved is not None and self._stranded() is not None:
            self._restore(saved, taken, released)
            return False
        self.decisions.extend(group)
        return True

    # --- reclaim -----------------------------------------------------------

    def _bound(self, s: QueueShare, guarantee: bool) -> float:
        return float(s.guaranteed) if guarantee else s.share

    def _reclaim(self, guarantee: bool) -> None:
        for s in self._share_order():
            bound = self._bound(s, guarantee)
            if s.used >= bound - _EPS or not self._waiting(s.name):
                continue
            for job in inner_order(self.inner, self._sub_view(s.name)):
                if not self._open(job.id):
                    continue
                if not s.may_hold(job) or not s.within(job.gpus, bound):
                    continue
                # The inner policy may have passed over it (its own order, a
                # head-of-line wait): work within the bound starts if it fits.
                placement = self._pack(job, s, guarantee) if job.gpus <= self.free else None
                if placement is not None:
                    saved = self._save() if self.again else None
                    self._take(job, placement)
                    self._started(s, job, placement)
                    self.decisions.append(Start(job.id, placement))
                    if saved is not None and self._stranded() is not None:
                        # Its start would make its queue's jobs victims
                        # for a job this pass suspended: it waits.
                        self._restore(saved, [(job, placement)], [])
                        continue
                    if s.used >= bound - _EPS:
                        break
                    continue
                victims = self._victims(s, guarantee)
                if not victims or self.free + sum(v.allocated_gpus for v in victims) < job.gpus:
                    continue
                if self._make_room(s, job, victims, guarantee) and s.used >= bound - _EPS:
                    break

    def _victims(self, s: QueueShare, guarantee: bool) -> list[JobView]:
        """Running jobs other queues may lose: preemptible, run `min_run`, queue over its bound."""
        now = self.view.now
        min_run = self.policy.min_run
        book = self.book
        out: list[tuple[float, float, int, JobView]] = []
        # A start of this pass has run 0 s: a victim only when min_run is 0
        # (latest started first, so it goes before any job that really ran).
        fresh = self.fresh.values() if min_run <= _EPS else ()
        for j in (*self.running.values(), *fresh):
            if j.id in self.stopped or not j.preemptible or j.queue == s.name:
                continue
            if j.started_at is None or now - j.started_at < min_run - _EPS:
                continue
            owner = book[j.queue]
            over = owner.used - self._bound(owner, guarantee)
            if over <= _EPS:
                continue
            out.append((-over / owner.queue.weight, -(j.started_at or 0.0), -j.id, j))
        out.sort(key=lambda t: t[:3])
        return [t[3] for t in out]

    def _make_room(self, s: QueueShare, job: JobView, victims: list[JobView], g: bool) -> bool:
        # Every victim's queue is over its bound now; one may end below it
        # (a gang's GPUs come whole): the waiting queue's bound comes first.
        for candidate in _typed_variants(job, s, g):
            allowed = victims
            while allowed:
                room = make_room(self.pool, candidate, allowed, self.free)
                if room is None:
                    break
                saved = self._save()  # make_room changed the pool only
                placement, used = room
                self._commit_room(s, job, placement, used)
                stranded = self._stranded()
                if stranded is None:
                    return True
                # It would leave a queue below its guarantee with a job it
                # suspended that others' jobs could make room for: undo, and
                # try again without that queue's jobs as victims.
                self._restore(saved, [(job, placement)], used)
                fewer = [v for v in allowed if v.queue != stranded]
                if len(fewer) == len(allowed):
                    break
                allowed = fewer
        return False

    def _commit_room(
        self, s: QueueShare, job: JobView, placement: Placement, used: list[JobView]
    ) -> None:
        """Record what `make_room` did to the pool: victims out, `job` started."""
        book = self.book
        # make_room changed the pool; mirror it in the node views.
        for v in used:
            assert v.placement is not None
            self._mark(v, v.placement, None)
            self.free += v.allocated_gpus
            book[v.queue].used -= v.allocated_gpus
            if v.id in self.fresh:
                self._withdraw(v)
            else:
                self.stopped.add(v.id)
                self.again[v.id] = v
                self.decisions.append(Preempt(v.id))
        self._mark(job, placement, job.id)
        self.free -= placement.num_gpus
        self._started(s, job, placement)
        self.decisions.append(Start(job.id, placement))

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

    # --- no job this pass put back in line is stranded -------------------------

    def _stranded(self) -> str | None:
        """The queue of a job this pass preempted (or whose start it
        withdrew) left waiting below its guarantee, fitting in it, while
        preemptible jobs (run `min_run`) of queues over their guarantee
        could make room for it; None if there is none. Such a job cannot
        start again in this pass, so the step that led here is refused
        instead (see the module doc)."""
        pool = self.pool
        for p in self.again.values():
            s = self.book[p.queue]
            if s.used + p.gpus > s.guaranteed or not s.may_hold(p):
                continue
            victims = self._victims(s, guarantee=True)
            if not victims or self.free + sum(v.allocated_gpus for v in victims) < p.gpus:
                continue
            room = make_room(pool, p, victims, self.free)
            if room is None:
                continue
            # Only asked: put the pool back.
            placement, used = room
            pool.release(p, placement)
            for v in used:
                assert v.placement is not None
                pool.take(v, v.placement)
            return s.name
        return None

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

    def _pack(self, job: JobView, s: QueueShare, guarantee: bool) -> Placement | None:
        for candidate in _typed_variants(job, s, guarantee):
            placement = self.pool.pack(candidate)
            if placement is not None:
                return placement
        return None

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
    """A pass's bookkeeping before one step, to undo it (`_Pass._restore`)."""

    decisions: list[Decision]
    started: set[int]
    fresh: dict[int, JobView]
    withdrawn: set[int]
    stopped: set[int]
    again: dict[int, JobView]
    open_count: dict[str, int]
    shares: dict[str, tuple[int, int]]
    free: int


def _groups(decisions: list[Decision]) -> Iterator[list[Decision]]:
    """Each Start with the preemptions and resizes decided just before it."""
    group: list[Decision] = []
    for d in decisions:
        group.append(d)
        if isinstance(d, Start):
            yield group
            group = []
    if group:
        yield group


def _free_in(pool: FreePool, placement: Placement) -> bool:
    by_name = {n.name: n for n in pool.nodes}
    for name, gpus in placement:
        node = by_name.get(name)
        if node is None:
            return False
        free = pool.free_gpus(node)
        if any(g not in free for g in gpus):
            return False
    return True


def _typed_variants(job: JobView, s: QueueShare, guarantee: bool) -> Iterator[JobView]:
    """The job as it may reclaim: on its queue's guaranteed GPU types when those are typed."""
    types = s.queue.typed if guarantee else ()
    if not types or job.gpu_type:
        yield job
        return
    for t in types:
        yield rebuild(job, gpu_type=t)
