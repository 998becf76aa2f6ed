"""Similarity: each job goes to the GPU type where it saves most time against the
cluster's average type (its model's speed-up there times the work it has left), its
speed on each type estimated from measured profiles or, for a model never measured, from
the most similar profiled models; jobs that waited past `max_wait` go first in arrival
order. Source: the model-similarity policy of Thanapol et al., "Scheduling Deep Learning
Training in GPU Cluster Using the Model-Similarity-Based Policy" (ACIIDS 2023), and
Gavel's heterogeneity-aware throughput matching and makespan policy (Narayanan et al.,
OSDI 2020).

Rule, on every pass:
1. For each job, the estimator (`core.estimator`) gives its expected
   speed on every GPU type present, at its GPU count (spread over
   servers where the type's servers are too small to hold it). Its
   affinity for type t is its speed on t over its GPU-weighted
   geometric-mean speed across the cluster's types: 2.0 means "twice
   as fast on t as on the average GPU here". A model nobody measured
   and nothing resembles gets 1.0 everywhere (type-agnostic).
   Its remaining work W is the seconds it still needs on an average
   GPU: its estimate (`estimated_duration`, taken as seconds on its
   fastest type) less its progress, times its affinity for that type.
   Jobs without an estimate get the median W of those with one (all
   equal when none has one: the ranking is then by affinity alone). On
   type t it needs W / aff(t) seconds, so moving it from type s to f
   saves W * (1/aff(s) - 1/aff(f)): long jobs that speed up most gain
   the most seconds. This is the makespan-aware part, in the spirit of
   Gavel's heterogeneity-aware makespan policy: the week-long jobs that
   set a batch's makespan get the fast types, the short ones fill the
   slow types, where they lose least.
2. Starvation guard: jobs that have waited `max_wait` seconds or more
   (since they last entered the queue) are served first, oldest first
   (among jobs that waited equally long, a batch submitted together:
   critical jobs first, longest first, then the rest shortest first; a
   job is critical when on its fastest type it needs at least half the
   drain time, all remaining work spread evenly over every GPU, so that
   starting it last would set the makespan), each on its fastest type
   with room (a mix of types only for a job bigger than any one type).
   If the oldest of them cannot start, nothing else starts in this
   pass: like FIFO's head of line, it then starts as soon as
   running jobs free enough GPUs, so every job's wait is bounded by
   `max_wait` plus the time the jobs ahead of it take.
3. The other jobs are matched to free GPUs: every (job, type) pair
   where the type has room for the job is ranked by the seconds the
   job saves there against an average GPU, W * (1 - 1/aff(t)), highest
   first (the longest-waiting first among equals), and started in that
   order while room lasts. So when V100s free up they go to the jobs
   that save most time on a V100, and K80s to the jobs that lose least
   time on one. A job stays on one type (a synchronous gang runs at
   its slowest GPU); one that needs more GPUs than any type has in
   total may mix types.
4. Exchanges: a job A just given GPUs of type f trades them for the
   same number of GPUs of type s held by a running preemptible job R
   when R gains at least `min_gain` times more from f over s than A
   does: (aff_R(f) / aff_R(s)) / (aff_A(f) / aff_A(s)) >= min_gain,
   and R saves more seconds on f than A loses on s (a short job never
   pushes a long one onto slower GPUs). A starts on s and R migrates
   to f (one checkpoint and restore). Each exchange raises the product
   of all jobs' affinities by at least `min_gain`, so exchanges cannot
   cycle.
5. Upgrades: a running preemptible job moves (one checkpoint and
   restore) to free GPUs of a type where it runs at least `min_gain`
   times faster than where it runs now (its slowest type), most seconds
   saved first; an upgrade never takes the room the biggest job waiting
   for that type needs. Before step 3 an upgrade must also save, by a
   factor `min_gain`, more seconds than any waiting job would save on
   the faster type over the slower one (so it only takes GPUs a waiting
   job would gain less from, and the GPUs it leaves go to the
   matching); after step 4 it may take any GPUs still idle. A job only
   moves up, so it never bounces.
   `migrate=false` turns steps 4 and 5 off (the policy then never
   moves a job).
A job that names a GPU type only goes on that type.

Options: `profiles` names the throughput table (`gavel`, shipped with
Schedulearn) or is a `ProfileTable` the host passes in (the live server
passes the profiles its jobs reported: `create("similarity",
profiles=table)`); `neighbours` is the estimator's k; `max_wait` the
starvation guard in seconds; `min_gain` and `migrate` the
exchanges and upgrades.
"""

from __future__ import annotations

import math
from itertools import compress, islice
from operator import eq, itemgetter, le, mul
from typing import ClassVar

from schedulearn.core.decisions import Decision, Resize, Start
from schedulearn.core.estimator import Estimator, builtin_table
from schedulearn.core.placement import FreePool
from schedulearn.core.policies._similarity_exchange import Partners, allowed, saving
from schedulearn.core.policies._similarity_pairs import pairs
from schedulearn.core.policy import QueueOrder, arrival_order
from schedulearn.core.preemption import can_retake
from schedulearn.core.registry import register
from schedulearn.core.throughput import ProfileTable
from schedulearn.core.views import ClusterView, JobView, Placement

# (model, GPUs, ((type, GPUs of that type, largest server of that type), ...))
_AffinityKey = tuple[str | None, int, tuple[tuple[str, int, int], ...]]


class _Types:
    """The cluster by GPU type during one pass: sizes, and free GPUs as the pass hands them out."""

    def __init__(self, view: ClusterView, pool: FreePool) -> None:
        self.total: dict[str, int] = {}
        self.largest_node: dict[str, int] = {}
        self.free: dict[str, int] = {}
        self.of: dict[str, str] = {}
        for node in view.nodes:
            self.of[node.name] = node.gpu_type
            if node.healthy and node.num_gpus:
                t = node.gpu_type
                self.total[t] = self.total.get(t, 0) + node.num_gpus
                self.largest_node[t] = max(self.largest_node.get(t, 0), node.num_gpus)
                self.free[t] = self.free.get(t, 0) + pool.num_free(node)
        self.shape = tuple(sorted((t, n, self.largest_node[t]) for t, n in self.total.items()))
        self.largest = max(self.total.values(), default=0)
        # Filled by `Similarity._remaining_work`: each job's remaining work on an
        # average GPU and, where it has an estimate, on its fastest type; and the
        # cluster's drain time.
        self.work: dict[int, float] = {}
        self.default_work = 1.0  # the work of a job without an estimate
        self.fastest: dict[int, float] = {}
        self.drain = 0.0
        # This pass's affinities by (model, GPUs), and a job's best one by (model,
        # GPUs, GPU type named): read for every job, so kept without hashing `shape`.
        self.affinities: dict[tuple[str | None, int], dict[str, float]] = {}
        self.best: dict[tuple[str | None, int, str | None], float] = {}
        # Also filled by `_remaining_work`, in its one read of every waiting job:
        # the waiting jobs that ask for GPUs, grouped by (model, GPUs, GPU type
        # named), jobs alike in all that the rule treats alike but for their work
        # and wait; the jobs of no GPUs; and those past `max_wait`, in queue order.
        self.waiting: dict[tuple[str | None, int, str | None], _Alike] = {}
        # The same jobs in queue order, each with its group and when it last
        # entered the queue (the matching's tie-break).
        self.queue: list[JobView] = []
        self.queue_groups: list[_Alike] = []
        self.queue_since: list[float] = []
        # ... and each one's id and work (`work`), for the matching's sort.
        self.queue_ids: list[int] = []
        self.queue_work: list[float] = []
        self.no_gpus: list[JobView] = []
        self.urgent: list[JobView] = []
        # The jobs started in this pass (`_start`), by id.
        self.started: dict[int, JobView] = {}
        # Filled by the pass's first `Similarity._upgrade`, read by both: each
        # running preemptible job's upgrades (`_Upgrades`).
        self.upgrades: list[_Upgrades] | None = None

    def single(self, placement: Placement) -> str | None:
        """The placement's one GPU type, or None when it mixes types."""
        parts = placement.parts
        if len(parts) == 1:  # most are on one node
            name, gpus = parts[0]
            return self.of[name] if gpus else None
        kinds = {self.of[name] for name, gpus in parts if gpus}
        return kinds.pop() if len(kinds) == 1 else None

    def take(self, placement: Placement, sign: int = 1) -> None:
        free, of = self.free, self.of
        for name, gpus in placement.parts:
            kind = of[name]
            free[kind] = free.get(kind, 0) - sign * len(gpus)


# A running preemptible job that may move up: the job, its GPUs, the type it runs at
# now (its slowest), and each type it runs at least `min_gain` times faster on, with
# the seconds it saves there. Alike in both upgrade steps of a pass, so found once.
_Upgrades = tuple[JobView, int, str, list[tuple[str, float]]]


class _Alike:
    """Waiting jobs of one (model, GPUs, GPU type named), in queue order; the least and
    the most work of those with an estimate, and whether one has none (set by
    `Similarity._remaining_work`); and, set by `_match`, the saving factor of each GPU
    type for them (by the types' order there; None: not on that type; none at all
    when they may mix types)."""

    __slots__ = ("best", "factors", "jobs", "least", "most", "negated", "unknown")

    def __init__(self) -> None:
        self.jobs: list[JobView] = []
        self.best: float | None = None  # `_Types.best` of the group's key, once known
        self.least = math.inf
        self.most = -math.inf
        self.unknown = False
        self.factors: list[float | None] = []
        self.negated: list[float] = []  # each factor negated; -1.0 for None


@register
class Similarity:
    name: ClassVar[str] = "similarity"
    tick_seconds: ClassVar[float | None] = None

    def __init__(
        self,
        profiles: str | ProfileTable = "gavel",
        neighbours: int = 3,
        max_wait: float = 6 * 3600.0,
        min_gain: float = 1.5,
        migrate: bool = True,
    ) -> None:
        if max_wait < 0:
            raise ValueError(f"max_wait must not be negative, not {max_wait}")
        if min_gain <= 1.0:
            raise ValueError(f"min_gain must be above 1 (a move must pay), not {min_gain}")
        if isinstance(profiles, str) and profiles != "gavel":
            raise ValueError(
                f"similarity: profiles takes gavel (the built-in table), not {profiles!r}; "
                "the live server supplies its imported profiles itself"
            )
        table = builtin_table(profiles) if isinstance(profiles, str) else profiles
        self.estimator = Estimator(table, neighbours)
        self.max_wait = float(max_wait)
        self.min_gain = float(min_gain)
        self.migrate = migrate
        # A pure function of its key, cached: the estimator's answers per job shape.
        self._affinity: dict[_AffinityKey, dict[str, float]] = {}

    def order(self, view: ClusterView) -> QueueOrder:
        # Honest: jobs are matched to GPU types by the time they save there, so the
        # next to start depends on which types have room, not on a rank.
        return arrival_order(
            view,
            f"no fixed order: jobs that waited {self.max_wait / 3600:g} h or more first, oldest "
            "first; then each job on the free GPU type where it saves most time; shown in "
            "arrival order",
            exact=False,
        )

    def decide(self, view: ClusterView) -> list[Decision]:
        if not view.pending and not (self.migrate and view.running):
            return []
        pool = FreePool(view)
        if pool.total_free() == 0 and all(j.gpus for j in view.pending):
            return []  # nothing can start, so nothing to exchange; no room to upgrade into
        types = _Types(view, pool)
        moving = self.migrate and len(types.total) > 1
        if not view.pending and not moving:
            return []  # nothing to start and, on one GPU type, nothing to move
        self._remaining_work(view, types)
        decisions: list[Decision] = []
        urgent = types.urgent
        for job in sorted(urgent, key=lambda j: (j.waiting_since, _batch_rank(j, types), j.id)):
            placement = self._place_urgent(pool, job, types)
            if placement is None:
                return decisions  # the guard: the oldest starving job holds the line
            _start(pool, types, job, placement, decisions)
        if moving:
            self._upgrade(view, pool, types, decisions, compete=True)
        self._match(view, pool, types, decisions)
        if moving:
            decisions = self._exchange(view, pool, types, decisions)
            self._upgrade(view, pool, types, decisions, compete=False)
        return decisions

    # --- the rule ------------------------------------------------------------

    def affinity(self, job: JobView, types: _Types, gpus: int | None = None) -> dict[str, float]:
        """The job's speed on each type over its GPU-weighted mean speed on the cluster."""
        n = max(1, job.gpus if gpus is None else gpus)
        mine = types.affinities.get((job.model, n))
        if mine is not None:
            return mine
        key = (job.model, n, types.shape)
        cached = self._affinity.get(key)
        if cached is not None:
            types.affinities[(job.model, n)] = cached
            return cached
        names = [t for t, _, _ in types.shape]
        # A type whose servers are too small runs the job spread over servers.
        spread = {t: n > largest for t, _, largest in types.shape}
        estimates = {s: self.estimator.speeds(job.model, names, n, s) for s in set(spread.values())}
        picked = {t: estimates[spread[t]].of(t) for t in names}
        absolute = all(p.steps_per_second is not None for p in picked.values())
        logs = {
            t: math.log(p.steps_per_second if absolute and p.steps_per_second else p.relative)
            for t, p in picked.items()
        }
        total = sum(types.total.values()) or 1
        centre = sum(types.total[t] * logs[t] for t in names) / total
        result = self._affinity[key] = {t: math.exp(logs[t] - centre) for t in names}
        types.affinities[(job.model, n)] = result
        return result

    def _remaining_work(self, view: ClusterView, types: _Types) -> None:
        """Each job's remaining work W: seconds it still needs on an average GPU here.

        The estimate (`estimated_duration`, seconds at its size on its fastest
        type) less its progress, times its affinity for that fastest type; a
        running job also loses what it did since its segment began. Jobs without
        an estimate get the median W of those with one (1.0 when none has one,
        which makes the ranking the plain affinity one).

        The same read of every waiting job groups them (`_Types.waiting`,
        `no_gpus`) and finds those past `max_wait` (`urgent`): on a backlog of
        thousands each read of every job costs, so there is one.
        """
        known: dict[int, float] = {}
        now, wait = view.now, self.max_wait
        fastest, bests, waiting = types.fastest, types.best, types.waiting
        urgent, no_gpus = types.urgent, types.no_gpus
        queue, queue_groups, queue_since = types.queue, types.queue_groups, types.queue_since
        queue_ids, queue_work = types.queue_ids, types.queue_work
        unknown_queued: list[int] = []  # positions in queue_work of jobs without an estimate
        # Each job's work times its GPUs (at least 1), pending then running; a job
        # without an estimate holds its GPUs here until the default is known.
        shares: list[float] = []
        unknown: list[tuple[int, int]] = []  # (position in shares, job id)
        for job in view.pending:
            gpus = job.gpus
            since = job.submitted_at if job.queued_at is None else job.queued_at
            if now - since >= wait:
                urgent.append(job)
            if not gpus:
                no_gpus.append(job)
            else:
                key = (job.model, gpus, job.gpu_type)
                group = waiting.get(key)
                if group is None:
                    group = waiting[key] = _Alike()
                group.jobs.append(job)
                job_id = job.id
                queue.append(job)
                queue_ids.append(job_id)
                queue_groups.append(group)
                queue_since.append(since)
                if job.placement is None and job.progress is None:
                    # `_left_on_best` of a waiting job without progress, inline.
                    # Its best affinity, once known, never changes in a pass: the
                    # group holds it, saving a lookup of the key a job.
                    best = group.best
                    if best is None:
                        best = group.best = bests.get(key)
                    estimate = job.estimated_duration
                    if best is not None and estimate is not None:
                        if job.started_at is None:
                            # `remaining_at(now)` of a job never started, inline:
                            # its estimate (at most its limit) less its service.
                            limit = job.time_limit
                            if limit is not None and limit < estimate:
                                estimate = limit
                            left = estimate - job.service_seconds
                            if not left > 0.0:
                                left = 0.0
                        else:
                            left = max(0.0, job.remaining_at(now) or 0.0)
                        fastest[job_id] = left
                        w = known[job_id] = left * best
                        queue_work.append(w)
                        shares.append(w * gpus)
                        # The group's least and most work (`_upgrade` reads them),
                        # in this read rather than in one of every group's jobs.
                        if w < group.least:
                            group.least = w
                        if w > group.most:
                            group.most = w
                        continue
            got = self._left_on_best(job, now, types)
            if got is None:
                unknown.append((len(shares), job.id))
                shares.append(float(gpus or 1))
                if gpus:
                    assert group is not None  # set above for every job with GPUs
                    group.unknown = True
                    unknown_queued.append(len(queue_work))
                    queue_work.append(1.0)  # the default, once known
            else:
                fastest[job.id], w = got
                known[job.id] = w
                shares.append(w * (gpus or 1))
                if gpus:
                    assert group is not None  # set above for every job with GPUs
                    queue_work.append(w)
                    if w < group.least:
                        group.least = w
                    if w > group.most:
                        group.most = w
        for job in view.running:
            got = self._left_on_best(job, now, types)
            if got is None:
                unknown.append((len(shares), job.id))
                shares.append(float(job.gpus or 1))
            else:
                fastest[job.id], known[job.id] = got
                shares.append(got[1] * (job.gpus or 1))
        default = _median(list(known.values())) if known else 1.0
        for at, job_id in unknown:
            known[job_id] = default
            shares[at] *= default
        for at in unknown_queued:
            queue_work[at] = default
        types.work = known
        types.default_work = default
        # The drain time: all remaining work spread evenly over every GPU.
        gpus = sum(types.total.values()) or 1
        types.drain = sum(shares) / gpus

    def _left_on_best(self, job: JobView, now: float, types: _Types) -> tuple[float, float] | None:
        """Seconds left on the job's fastest type, and the same on an average GPU."""
        if job.estimated_duration is None or not job.gpus or not types.total:
            return None
        n = job.placement.num_gpus if job.placement and job.placement.num_gpus else job.gpus
        best = types.best.get((job.model, n, job.gpu_type))
        if best is None:
            affinity = self.affinity(job, types, n)
            best = max((a for t, a in affinity.items() if allowed(job, t)), default=1.0)
            types.best[(job.model, n, job.gpu_type)] = best
        if job.progress is None:
            left = job.remaining_at(now) or 0.0  # wall seconds served stand in for work
        else:
            affinity = self.affinity(job, types, n)
            left = job.estimated_duration * (1.0 - min(1.0, max(0.0, job.progress)))
            if job.placement is not None and job.started_at is not None:
                here = min(affinity[types.of[name]] for name, g in job.placement if g)
                left -= max(0.0, now - job.started_at) * here / best
        left = max(0.0, left)
        return left, left * best

    def _place_urgent(self, pool: FreePool, job: JobView, types: _Types) -> Placement | None:
        if not job.gpus or not types.total or (job.gpus > types.largest and not job.gpu_type):
            return pool.pack(job)
        affinity = self.affinity(job, types)
        for gpu_type in sorted(affinity, key=lambda t: (-affinity[t], t)):
            if allowed(job, gpu_type) and types.free.get(gpu_type, 0) >= job.gpus:
                placement = pool.pack(job, gpu_type=gpu_type)
                if placement is not None:
                    return placement
        return None

    def _match(
        self, view: ClusterView, pool: FreePool, types: _Types, decisions: list[Decision]
    ) -> None:
        started = {d.job_id for d in decisions}
        free = types.free
        # CPU-only jobs, and those bigger than any one type (which may mix types).
        mixed = [j for j in types.no_gpus if j.id not in started]
        # The GPU types in name order: one job's pairs of equal saving go in this order.
        names = sorted(types.total)
        width = len(names)
        mixes = False
        for (_, gpus, named), group in types.waiting.items():
            if not types.total or (gpus > types.largest and not named):
                group.factors = []
                mixed.extend([j for j in group.jobs if j.id not in started])
                mixes = True
                continue
            # Alike in model and GPUs: one affinity table, so each type's saving
            # factor and whether it has room are judged once for the group.
            # `saving(types, job, 1.0, score)` is the job's work times the factor.
            first = group.jobs[0]
            affinity = self.affinity(first, types)
            group.factors = factors = [
                1.0 / 1.0 - 1.0 / affinity[t]
                if allowed(first, t) and free.get(t, 0) >= gpus
                else None
                for t in names
            ]
            group.negated = [-1.0 if f is None else -f for f in factors]
        jobs, groups, since = types.queue, types.queue_groups, types.queue_since
        ids, lefts = types.queue_ids, types.queue_work
        if started or mixes:
            keep = [
                k
                for k, (j, g) in enumerate(zip(jobs, groups, strict=True))
                if g.factors and j.id not in started
            ]
            jobs, groups = [jobs[k] for k in keep], [groups[k] for k in keep]
            since, ids, lefts = (
                [since[k] for k in keep],
                [ids[k] for k in keep],
                [lefts[k] for k in keep],
            )
        if not _in_order(since, ids):
            order = sorted(range(len(jobs)), key=lambda k: (since[k], ids[k]))
            jobs, groups = [jobs[k] for k in order], [groups[k] for k in order]
            ids, lefts = [ids[k] for k in order], [lefts[k] for k in order]
        # Every (job, type) pair, highest saving first; among equal savings the one
        # that waited longest (then the lower id, then the type by name) first: a
        # pair's key, -(work * factor), is work * -factor (negation is exact), so
        # each type's keys are one product of two lists, in C, and `pairs` walks
        # them by key, then job (the jobs are in tie order), then type. A pair the
        # group may not take gets any key (-work): the walk passes over it.
        rows = [g.negated for g in groups]
        keys = [list(map(mul, lefts, map(itemgetter(p), rows))) for p in range(width)]
        # A full type: every later pair of it needs one of its GPUs (and nothing
        # here frees any), so `pairs` leaves them out.
        closed: set[int] = set()
        # No more of a type's pairs can start than it has GPUs free: `pairs` sorts
        # about that many of each type's first.
        heads = [free.get(t, 0) for t in names]
        for k, p in pairs(keys, heads, closed):
            job = jobs[k]
            job_id = job.id
            if job_id in started:
                continue
            gpu_type = names[p]
            if free.get(gpu_type, 0) < job.gpus or groups[k].factors[p] is None:
                continue
            placement = pool.pack(job, gpu_type=gpu_type)
            if placement is not None:
                _start(pool, types, job, placement, decisions)
                started.add(job_id)
                if free.get(gpu_type, 0) <= 0:
                    if all(n <= 0 for n in free.values()):
                        break  # every type is full
                    closed.add(p)
        for job in sorted(mixed, key=lambda j: (j.waiting_since, j.id)):
            placement = pool.pack(job)
            if placement is not None:
                _start(pool, types, job, placement, decisions)

    def _exchange(
        self, view: ClusterView, pool: FreePool, types: _Types, decisions: list[Decision]
    ) -> list[Decision]:
        partners = Partners(self, view, types)
        pending = types.started
        moved = {d.job_id for d in decisions if isinstance(d, Resize)}
        out: list[Decision] = []
        for d in decisions:
            if not isinstance(d, Start):
                out.append(d)
                continue
            a = pending[d.job_id]
            f = types.single(d.placement)
            if f is None or not a.gpus:
                out.append(d)
                continue
            best = partners.best(a, f, moved)
            if best is None or not _swap(pool, a, d.placement, best):
                out.append(d)
                continue
            r = best
            assert r.placement is not None
            moved.add(r.id)
            out.append(Start(a.id, r.placement))
            out.append(Resize(r.id, d.placement))
        return out

    def _upgrade(
        self,
        view: ClusterView,
        pool: FreePool,
        types: _Types,
        decisions: list[Decision],
        compete: bool,
    ) -> None:
        started = {d.job_id for d in decisions}
        # Before the matching (`compete`), a move must also beat every waiting job's
        # own ratio between the two types, by `min_gain`: it then takes GPUs that job
        # would gain less from, and leaves it the ones it gives up.
        rival_saving: dict[tuple[str, str], float] = {}
        if compete:
            # Waiting jobs alike in model, size and GPU type share their affinities,
            # so the most any of them saves is at the least or the most work among
            # them (a job saves its work times a factor of the pair of types).
            alike: list[tuple[JobView, float, float]] = []
            works = types.work
            for (_, gpus, _), group in types.waiting.items():
                if gpus > types.largest:
                    continue
                if not started and not math.isnan(types.drain):
                    # Every job of the group: its least and most work were found as
                    # the queue was read (`_remaining_work`), with the work of the
                    # jobs without an estimate if it has any. (A NaN work, which
                    # makes the drain NaN, has no least or most: read them below.)
                    least, most = group.least, group.most
                    if group.unknown:
                        least, most = min(least, types.default_work), max(most, types.default_work)
                    alike.append((group.jobs[0], least, most))
                    continue
                kept = [j for j in group.jobs if j.id not in started]
                if not kept:
                    continue
                ws = [works[j.id] for j in kept]
                alike.append((kept[0], min(ws), max(ws)))
            for job, least, most in alike:
                aff = self.affinity(job, types)
                for f in aff:
                    for s_ in aff:
                        if f != s_ and allowed(job, f):
                            factor = 1.0 / aff[s_] - 1.0 / aff[f]
                            saved = max(least * factor, most * factor)
                            key2 = (f, s_)
                            rival_saving[key2] = max(rival_saving.get(key2, 0.0), saved)
        # Room the biggest still-waiting job could use on each type: keep it free.
        sizes: dict[str | None, set[int]] = {}  # by the GPU type a job names
        for (_, gpus, named), group in types.waiting.items():
            if not started or any(j.id not in started for j in group.jobs):
                sizes.setdefault(named, set()).add(gpus)
        keep = dict.fromkeys(types.total, 0)
        for named, wanted in sizes.items():
            for gpu_type, total in types.total.items():
                if not named or named == gpu_type:
                    keep[gpu_type] = max([keep[gpu_type], *(g for g in wanted if g <= total)])
        moves: list[tuple[float, float, int, str, JobView, int]] = []
        if types.upgrades is None:
            types.upgrades = self._upgrades(view, types)
        for job, n, now, options in types.upgrades:
            if job.id in started:
                continue
            for gpu_type, saved in options:
                if saved >= self.min_gain * rival_saving.get((gpu_type, now), 0.0):
                    moves.append((-saved, job.started_at or 0.0, job.id, gpu_type, job, n))
        moves.sort(key=lambda m: m[:4])
        moved: set[int] = set()
        for _, _, job_id, gpu_type, job, n in moves:
            if job_id in moved or types.free.get(gpu_type, 0) - keep[gpu_type] < n:
                continue
            placement = pool.pack(_as(job, gpu_type, n), n)
            if placement is None:
                continue
            pool.take(job, placement)
            types.take(placement)
            decisions.append(Resize(job_id, placement))
            moved.add(job_id)

    def _upgrades(self, view: ClusterView, types: _Types) -> list[_Upgrades]:
        """Each running preemptible job's upgrades (`_Upgrades`), in `view.running` order."""
        found: list[_Upgrades] = []
        min_gain, of = self.min_gain, types.of
        for job in view.running:
            if not job.preemptible or job.placement is None:
                continue
            n = job.placement.num_gpus
            if not n:
                continue
            affinity = self.affinity(job, types, n)
            now = min((of[name] for name, g in job.placement.parts if g), key=affinity.__getitem__)
            slow = affinity[now]
            options = [
                (gpu_type, saving(types, job, slow, speed))
                for gpu_type, speed in affinity.items()
                if speed / slow >= min_gain and allowed(job, gpu_type)
            ]
            if options:
                found.append((job, n, now, options))
        return found


def _batch_rank(job: JobView, types: _Types) -> float:
    """Order among jobs that waited equally long (a batch submitted together):
    critical jobs first, longest first, then the rest shortest first.

    A job is critical when even on its fastest type it takes at least half
    the cluster's drain time: started last, it would set the makespan.
    """
    fastest = types.fastest.get(job.id)
    if fastest is None:
        return 0.0  # no estimate: in arrival order, after the critical jobs
    return -1e18 - fastest if fastest >= types.drain / 2 else fastest


def _in_order(since: list[float], ids: list[int]) -> bool:
    """Are the jobs in queue order: by when they entered the queue, then by id?"""
    later = islice(since, 1, None)
    if not all(map(le, since, later)):
        return False
    ties = compress(range(len(since) - 1), map(eq, since, islice(since, 1, None)))
    return all(ids[k] < ids[k + 1] for k in ties)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _as(job: JobView, gpu_type: str, gpus: int | None = None) -> JobView:
    """The job as if it had asked for `gpu_type` and, when given, `gpus` GPUs, so that
    the pool only offers those."""
    if (job.gpu_type == gpu_type or not gpu_type) and gpus in (None, job.gpus):
        return job
    return JobView(
        id=job.id,
        submitted_at=job.submitted_at,
        gpus=job.gpus if gpus is None else gpus,
        cpus=job.cpus,
        memory_gb=job.memory_gb,
        gpu_type=gpu_type or job.gpu_type,
        model=job.model,
        image=job.image,
        constraints=job.constraints,
        # Where it may run: a node that runs jobs as their owners needs its account.
        user=job.user,
        account=job.account,
    )


def _start(
    pool: FreePool, types: _Types, job: JobView, placement: Placement, decisions: list[Decision]
) -> None:
    pool.take(job, placement)
    types.take(placement)
    types.started[job.id] = job
    decisions.append(Start(job.id, placement))


def _swap(pool: FreePool, a: JobView, a_placement: Placement, r: JobView) -> bool:
    """Give `a` the GPUs `r` holds and `r` those `a` was given, if CPUs and memory allow."""
    assert r.placement is not None
    r_placement = r.placement
    pool.release(a, a_placement)
    pool.release(r)
    if can_retake(pool, a, r_placement):
        pool.take(a, r_placement)
        if can_retake(pool, r, a_placement):
            pool.take(r, a_placement)
            return True
        pool.release(a, r_placement)
    pool.take(a, a_placement)
    pool.take(r, r_placement)
    return False
