"""Goodput: size every job to maximise the cluster's rate of finishing work.

Source: the goal of Pollux (Qiao et al., OSDI'21): co-adapt each job's
GPU count and batch size to its *goodput* (throughput x statistical
efficiency, `core.goodput`). Pollux searches allocations with a
genetic algorithm every 60 s (over an hour of CPU per workload); this
policy allocates greedily by marginal gain instead, in milliseconds.

Rule, one pass:
1. Every job (waiting, or running and preemptible) gets a value for each
   GPU count it may run at. With a goodput model fitted from what the
   host reports (`ClusterView.goodput`) and the work it has left `W`,
   a job on `a` GPUs finishes in `T(a) = W / goodput(a)`; its value is
   `speedup(a) * (1 / T(1)) ** (1 - fairness)`, with `speedup(a) =
   goodput(a) / goodput(1)`. At `fairness=0` the value is `1 / T(a)`:
   the sum over jobs is the rate at which jobs complete, and maximising
   it favours short jobs as shortest-remaining-time-first does, while
   spreading GPUs where they speed jobs up most. At `fairness=1` every
   job's speedup counts alike (Pollux's utility). The default, 0.25
   (0.5 until stop 46), was chosen on Pollux's held-out
   job-load workloads with `lead` on: against Pollux's published runs
   -16.9% / -10.9% (tuning / validation workloads) with no length
   information against 0.5's -15.7% / -9.3%, and -17.0% / -11.5% with
   learned estimates against -16.4% / -11.0% (docs/results.md, section
   2). The time estimates behind `T` come from a model still being
   learnt, and from least attained service for jobs of unknown length,
   so they are not trusted fully (fairness 0). In a pass where some job's
   remaining work is an estimate learned from ended jobs (`JobGoodput.
   estimated`), every job is weighed with `fairness_learned` (0.1)
   instead, one exponent a pass so that weights stay comparable: with
   learned estimates, against 0.25 throughout, on Pollux's held-out
   job-load workloads the geometric mean JCT fell 0.4% (tuning) and 1.1%
   (validation), and on the 8 compared workloads the mean 2,325 -> 2,313 s
   (issue 34; the first value tried, from stop 46's global 0.1 runs).
   With no lengths or declared ones no job is estimated: nothing changes.
2. Changing a running job's allocation, or starting a job, costs
   `restart_cost` seconds (checkpoint and restore): the value of any
   count other than a running job's current one is scaled by
   `T(a) / (T(a) + restart_cost * hysteresis)`, so a job is resized only
   when the time it saves over its remaining run exceeds the restart
   several times over; a waiting job's by `T(a) / (T(a) + restart_cost)`.
3. GPUs go out greedily: starting from nothing, repeatedly give the job
   with the best value gained per GPU the jump to its next count
   (jumps, not single GPUs, so the bonus of keeping a current count is
   seen), until no GPU is left or no jump gains.
4. Counts are placed: jobs keeping their count keep their GPUs; the
   others are packed largest first (one node when one holds the job,
   otherwise the fewest nodes), falling back to smaller counts; a
   running job that cannot be placed is preempted.

What a job's length is known from (`JobGoodput.remaining`): the total
its spec declares, or an estimate learned from ended jobs; with neither
(Pollux's information), the job is expected to need as much again as it
has made (least attained service, as Tiresias assumes), at least
`floor` and at most `ceiling` seconds on one GPU (0: no ceiling): young
jobs weigh alike, old ones less, and the oldest alike again, so that a
very long job is not starved by each newcomer. Both were chosen on
Pollux's job-load workloads (its artifact's `workloads-0.5` 1 and 5 and
`workloads-2.0` 1 and 2), never on the 8 workloads it is compared on:
against Pollux's published runs there, floor 600 s gave +2.3%, 3,000 s
-4.7% (6,000 and 12,000 s the same); then a ceiling of 20,000 s -4.8%,
60,000 s -6.6%, 120,000 s -7.0%, 250,000 s -6.1%.

Among jobs of one model (and initial batch) of unknown length, least
attained service is turned round once the model's leader, its job with
the most progress, has made `lead` seconds' worth on one GPU (3,000 s,
the floor; 0: off): each is expected to need the leader's estimate plus
the progress it trails the leader by (`core.policies.goodput_lead`), so
jobs of one model that train alike finish one after another, the one
nearest its end first, instead of sharing GPUs and finishing together
(Pollux's imagenet jobs, days on one GPU, did so last of all). Across
models nothing changes. Measured against Pollux's published runs
(docs/results.md, section 2): on the held-out workloads with no length
information -15.7% (tuning) and -9.3% (validation) against -6.4% and
-2.5% without it; with learned estimates -16.4% and -11.0% against
-13.8% and -9.2%. It relies on jobs of one model training alike: where
they do not, a young job of a model is held back behind an old one.

A job never measured has no absolute speed yet: it is treated as the
most urgent (least attained service first, as Tiresias does for jobs of
unknown length) and, like in Pollux, no job runs on more than
`explore` times the most GPUs it has been measured on, so the model
learns each size before it is trusted. Jobs the host reports nothing
about use a linear-speedup prior (90% per added GPU) with their
estimated duration, or none. Non-preemptible running jobs are never
touched; rigid jobs run at their one size.

With `share` (off by default), every waiting job and every running job
of unknown length first gets its least count before any job grows
(`core.policies.goodput_weight`): a newcomer no longer stops an old job
of unknown length to grow, as in Pollux, whose power mean of speedups
is zero while any job has no GPU. Measured against Pollux's published
runs it gained 0.2-1.4 points with no length information on held-out
workloads (and nothing on the 8 compared) and lost 2 points with
learned estimates, so it stays off (docs/results.md, section 2).

With `spread` below 1 (1, off, by default), a job of unknown length is
valued by `u(speedup)` instead of its speedup, `u(x) = 1 + (x^p - 1) / p`
with `p = spread` (`1 + ln x` at 0; Pollux's power mean of speedups,
`2 - 1/x`, at -1): growth gains less the faster a job already runs, so
GPUs a young job would grow on go to an old one, while least attained
service still orders them. Jobs of known length keep linear values
(shortest remaining time first gains from concentrating GPUs). Measured
(docs/results.md, section 2, Stop 45): with no length information it
gained 0.2-1.3 points on the tuning workloads and 3-5 on the validation
ones, and nothing on the 8 compared; with learned estimates it lost
0.4-2 points on the tuning workloads at every `p`, so it stays off.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from functools import lru_cache
from itertools import chain, compress, repeat
from operator import attrgetter, is_, itemgetter
from typing import ClassVar

from schedulearn.core.decisions import Decision, Preempt, Resize, Start
from schedulearn.core.goodput import GoodputModel, JobGoodput
from schedulearn.core.placement import FreePool, largest_node_gpus
from schedulearn.core.policies.goodput_kept import KeptWeights
from schedulearn.core.policies.goodput_lead import group_of, leaders, trailing_work
from schedulearn.core.policies.goodput_weight import share_first, spread_utility
from schedulearn.core.policy import QueueOrder
from schedulearn.core.preemption import can_retake
from schedulearn.core.registry import register
from schedulearn.core.views import ClusterView, JobView, Placement

PRIOR_EFFICIENCY = 0.9  # per added GPU, for jobs the host reports nothing about


class _Job:
    """One job's options in this pass: counts it may take and what each is worth."""

    __slots__ = ("counts", "current", "jump", "unknown", "values", "view")

    def __init__(
        self, view: JobView, counts: list[int], values: dict[int, float], unknown: bool = False
    ) -> None:
        self.view = view
        self.counts = counts  # ascending, the candidate GPU counts (> 0)
        self.current = view.allocated_gpus
        self.values = values  # GPU count -> value; 0 GPUs are worth 0
        # Of unknown speed: its values are set in each pass from the pass's best weight.
        self.unknown = unknown
        # A kept rigid job's one jump, as `_greedy` ranks it: (-gain, job id, count);
        # None: worked out in each pass (`keep_jump`).
        self.jump: tuple[float, int, int] | None = None

    def keep_jump(self) -> None:
        """Work out a rigid job's one jump once, for an entry kept from pass to pass:
        its values are final (`goodput_kept`), so the jump is too."""
        if len(self.counts) == 1 and not self.unknown:
            c = self.counts[0]  # > 0, as every count
            gain = self.values[c] / c
            if gain > 1e-15:
                self.jump = (-gain, self.view.id, c)

    def value(self, count: int) -> float:
        return self.values.get(count, 0.0)


@register
class Goodput:
    name: ClassVar[str] = "goodput"
    tick_seconds: ClassVar[float | None] = 60.0
    # Ask the simulator for each job's measured steps and gradient statistics.
    uses_goodput: ClassVar[bool] = True

    def __init__(
        self,
        fairness: float = 0.25,
        restart_cost: float = 30.0,
        hysteresis: float = 8.0,
        explore: float = 4.0,
        floor: float = 3000.0,
        ceiling: float = 120_000.0,
        share: bool = False,
        spread: float = 1.0,
        lead: float = 3000.0,
        fairness_learned: float = 0.1,
    ) -> None:
        if not 0.0 <= fairness <= 1.0:
            raise ValueError(f"goodput: fairness must be in [0, 1], not {fairness}")
        if not 0.0 <= fairness_learned <= 1.0:
            raise ValueError(f"goodput: fairness_learned must be in [0, 1], not {fairness_learned}")
        if restart_cost < 0 or hysteresis < 0:
            raise ValueError("goodput: restart_cost and hysteresis must not be negative")
        if explore < 1:
            raise ValueError(f"goodput: explore must be 1 or more, not {explore}")
        if floor < 0 or ceiling < 0:
            raise ValueError("goodput: floor and ceiling must not be negative (ceiling 0: none)")
        if not -1.0 <= spread <= 1.0:
            raise ValueError(f"goodput: spread must be in [-1, 1] (1: off), not {spread}")
        self.fairness = float(fairness)
        self.fairness_learned = float(fairness_learned)
        self.restart_cost = float(restart_cost)
        self.hysteresis = float(hysteresis)
        self.explore = float(explore)
        self.floor = float(floor)
        self.ceiling = float(ceiling)
        self.share = bool(share)
        self.spread = float(spread)
        if lead < 0:
            raise ValueError(f"goodput: lead must not be negative (0: off), not {lead}")
        self.lead = float(lead)
        # Waiting jobs' weighing from the last pass (a cache, `goodput_kept`).
        self._kept: KeptWeights[_Job] = KeptWeights()

    # --- values --------------------------------------------------------------

    def _jobs(self, view: ClusterView) -> list[_Job]:
        node_size = max(largest_node_gpus(view), 1)
        reports = view.goodput or {}
        penalty = self.restart_cost * self.hysteresis
        restart, exponent = self.restart_cost, 1.0 - self.fairness
        # `fairness_learned`: the exponent of every job of a pass in which some job's
        # remaining work is a learned estimate (`JobGoodput.estimated`). One exponent
        # a pass, so that every job's weight stays on one scale.
        if any(info.estimated for info in reports.values()):
            exponent = 1.0 - self.fairness_learned
        total = view.total_gpus
        jobs: list[_Job] = []
        unknown: list[_Job] = []
        urgent = 0.0  # the best value of one GPU among measured jobs
        now = view.now
        # Counts (and the prior's speeds) of the jobs without reports, by (least, most,
        # allocated): a pass over thousands of waiting jobs meets few distinct sizes.
        # Read only, so shared.
        grids: dict[tuple[int, int, int], tuple[list[int], dict[int, float]]] = {}
        # What a waiting job's weighing depends on besides its view (`goodput_kept`).
        kept = self._kept
        kept.begin(
            (
                node_size,
                total,
                exponent,
                restart,
                penalty,
                self.explore,
                self.floor,
                self.ceiling,
                self.spread,
                self.lead,
            )
        )
        # Not with `share`: its bonus goes into the values (`share_first`). With no
        # reports either, every waiting job is looked up at once (`KeptWeights.many`)
        # and only those not kept are weighed here, each into its place in `hits`.
        bulk = not reports and not self.share
        pending = view.pending
        todo: Iterable[tuple[int, JobView]]
        if bulk:
            hits = kept.many(pending)
            missed = list(compress(range(len(pending)), map(is_, hits, repeat(None))))
            waiting = zip(missed, map(pending.__getitem__, missed), strict=True)
            todo = chain(zip(repeat(-1), view.running), waiting)
        else:
            hits = []
            todo = zip(repeat(-1), chain(view.running, pending))
        # `lead`: the most progress made by a job of each model of unknown length.
        leads = leaders(chain(view.running, pending), reports) if self.lead and reports else None
        for at, job in todo:
            if job.placement is not None and not job.preemptible:
                continue
            info = reports.get(job.id) if reports else None
            keep = info is None and not self.share and kept.keepable(job)
            if keep and not bulk and (got := kept.get(job)) is not None:
                entry, weight = got
                if entry.unknown:
                    unknown.append(entry)
                elif weight > urgent:
                    urgent = weight
                jobs.append(entry)
                continue
            speeds: dict[int, float] | None
            work: float | None
            if info is None:
                key = (job.least_gpus, job.most_gpus, job.allocated_gpus)
                grid = grids.get(key)
                if grid is None:
                    grid_counts = [
                        c for c in _counts(job, node_size, None, self.explore) if c <= total
                    ]
                    grid = grids[key] = (grid_counts, _prior_speeds(tuple(grid_counts)))
                counts, speeds = grid
                if not counts:
                    continue
                # The prior (linear speedup): work in seconds at one GPU, or unknown.
                left = job.remaining_at(now)
                work = None if left is None else max(left * _linear(job.gpus), 1e-9)
            else:
                counts = [c for c in _counts(job, node_size, info, self.explore) if c <= total]
                if not counts:
                    continue
                group = group_of(job, info) if leads else None
                speeds, work = _speeds_and_work(
                    info,
                    counts,
                    node_size,
                    self.floor,
                    self.ceiling,
                    None if leads is None or group is None else leads.get(group),
                    self.lead,
                )
            base = 0.0
            if speeds is not None and work is not None:
                base = speeds.get(1) or speeds[counts[0]] / counts[0]
            if base <= 0 or speeds is None or work is None:
                # Valued below, once the pass's best weight is known; kept with its
                # counts (its values are set anew each pass).
                entry = _Job(job, counts, {}, unknown=True)
                weight = 0.0  # no weight: leaves the best one as it is
                if at < 0:
                    unknown.append(entry)
            else:
                weight = (base / work) ** exponent
                if weight > urgent:
                    urgent = weight
                current = job.allocated_gpus
                # A first start costs one restart whatever the count; a change of a
                # running job is damped further (hysteresis), so jobs do not thrash.
                cost = penalty if current else restart
                values: dict[int, float] = {}
                # `spread` for jobs of unknown length only: with a length known,
                # shortest remaining time first gains from concentrating GPUs.
                power = self.spread
                spread = power < 1.0 and info is not None and info.remaining is None
                for a in counts:
                    s = speeds[a]
                    v = weight * s / base if s > 0 else 0.0
                    if a != current and s > 0:
                        t = work / s
                        v *= t / (t + cost)
                    if spread and v > 0:
                        v = weight * spread_utility(v / weight, power)
                    values[a] = v
                entry = _Job(job, counts, values)
            if keep:
                entry.keep_jump()
                kept.put(job, entry, weight)
            if at < 0:
                jobs.append(entry)
            else:
                hits[at] = (job, entry, weight)
        if bulk:
            # The waiting jobs, kept or weighed above, in queue order (those with no
            # count left out), as the loop does for each: the same maximum.
            found = list(filter(None, hits))
            entries = list(map(_ENTRY, found))
            jobs.extend(entries)
            urgent = max(chain((urgent,), map(_WEIGHT, found)))
            unknown.extend(compress(entries, map(_UNKNOWN, entries)))
        kept.end()
        # Unknown speed: most urgent, linear speedup. With nothing to weigh a
        # restart against, a running job keeps its GPUs ahead of a waiting one
        # (no preemption to start a job of unknown worth) and is resized last.
        urgent = (urgent or 1.0) * 2.0
        for entry in unknown:
            current = entry.current
            for a in entry.counts:
                factor = 1.0 if current == 0 else 2.0 if a == current else 0.5
                entry.values[a] = urgent * a * factor
        return jobs

    def order(self, view: ClusterView) -> QueueOrder:
        """Waiting jobs by the value per GPU of their best first allocation.

        Not exact: the greedy allocation hands out GPUs by marginal value,
        which depends on what the other jobs already hold, so two jobs of
        equal value per GPU may start in either order."""
        pending = {j.id for j in view.pending}
        ranked: list[tuple[float, float, int, JobView]] = []
        for entry in self._jobs(view):
            if entry.view.id in pending:
                best = max((v / c for c, v in entry.values.items() if c > 0), default=0.0)
                ranked.append((-best, entry.view.submitted_at, entry.view.id, entry.view))
        ranked.sort(key=lambda r: r[:3])
        listed = {r[2] for r in ranked}
        rest = [j for j in view.pending if j.id not in listed]
        return QueueOrder(
            tuple([r[3] for r in ranked] + rest),
            "no fixed order: GPUs go to the jobs with the most goodput gained per GPU; "
            "shown by each job's best value per GPU",
            exact=False,
        )

    # --- allocation ------------------------------------------------------------

    def decide(self, view: ClusterView) -> list[Decision]:
        if not view.pending and not any(j.preemptible for j in view.running):
            return []
        if not any(j.preemptible and j.placement is not None for j in view.running):
            pool = FreePool(view)
            if pool.total_free() == 0:
                # No GPU free and none to take back: only jobs of no GPUs can start.
                return sorted(_cpu_tasks(view, pool), key=_order)
        jobs = self._jobs(view)
        if self.share:
            share_first(jobs, view.goodput)
        fixed = sum(j.allocated_gpus for j in view.running if not j.preemptible)
        budget = view.total_gpus - fixed
        target = _greedy(jobs, budget)
        return _place(view, jobs, target)


def _counts(job: JobView, node_size: int, info: JobGoodput | None, explore: float) -> list[int]:
    """The GPU counts a job may run at: every count up to a node, then whole nodes."""
    least, most = job.least_gpus, job.most_gpus
    if least <= 0:
        return []
    if info is not None:
        most = min(most, info.limits.max_replicas)
        measured = max((s.replicas for s in info.samples), default=0)
        most = min(most, max(least, math.floor(explore * measured), 1))
        most = max(most, min(job.allocated_gpus, job.most_gpus))
    if most < least:
        return []
    current = job.allocated_gpus if least <= job.allocated_gpus <= most else least
    return list(_count_grid(least, most, current, node_size))


@lru_cache(maxsize=4096)
def _count_grid(least: int, most: int, current: int, node_size: int) -> tuple[int, ...]:
    counts = set(range(least, min(most, node_size) + 1))
    # Whole nodes past one node: every node up to 4, then every other node.
    c = node_size * max(1, -(-least // node_size))
    while c <= most:
        counts.add(c)
        c += node_size if c < 4 * node_size else 2 * node_size
    counts.update((least, most, current))
    return tuple(sorted(counts))


def _speeds_and_work(
    info: JobGoodput,
    counts: list[int],
    node_size: int,
    floor: float,
    ceiling: float = 0.0,
    lead: float | None = None,
    lead_after: float = 0.0,
) -> tuple[dict[int, float] | None, float | None]:
    """From a job's reports: progress per second at each count (and at 1), and the
    progress left (None: unknown). Jobs without reports use the prior (`_jobs`).

    Without a declared or learned length the job is expected to need as much
    again as it has made so far (the longer a job has run, the longer it will
    run: least attained service, as Tiresias assumes), between `floor` and
    `ceiling` seconds on one GPU."""
    if not info.samples:
        return None, None
    model: GoodputModel = info.model()
    speeds = {a: model.speed(-(-a // node_size), a) for a in counts}
    speeds.setdefault(1, model.speed(1, 1))
    if info.remaining is not None:
        return speeds, max(info.remaining, 1e-9)
    work = max(info.progress, speeds[1] * floor, 1e-9)
    if lead is not None and lead_after > 0 and lead > speeds[1] * lead_after:
        # `lead`: past `lead_after` seconds of its model's leader, a job trails the
        # leader (`core.policies.goodput_lead`).
        return speeds, trailing_work(lead, info.progress, speeds[1], floor, ceiling)
    if ceiling > 0:
        # Past the ceiling every job of unknown length weighs alike.
        work = min(work, max(speeds[1] * ceiling, 1e-9))
    return speeds, work


def _linear(a: int) -> float:
    return 1.0 + PRIOR_EFFICIENCY * (a - 1) if a > 0 else 0.0


@lru_cache(maxsize=1024)
def _prior_speeds(counts: tuple[int, ...]) -> dict[int, float]:
    """The prior's speed at each count and at 1 (read only: shared between jobs)."""
    return {a: _linear(a) for a in (*counts, 1)}


def _greedy(jobs: list[_Job], budget: int) -> list[int]:
    """GPU counts by best marginal value per GPU, by job index."""
    alloc = [0] * len(jobs)

    def best_jump(k: int, free: int) -> tuple[float, int] | None:
        here = alloc[k]
        values = jobs[k].values
        base = values[here] if here else 0.0
        best: tuple[float, int] | None = None
        for c in jobs[k].counts:
            if c <= here:
                continue
            if c - here > free:
                break
            gain = (values[c] - base) / (c - here)
            if gain > 1e-15 and (best is None or gain > best[0]):
                best = (gain, c)
        return best

    free = budget
    heap: list[tuple[float, int, int, int]] = []
    append = heap.append
    # Whether each job is rigid (one count): one jump, from nothing, and popped
    # once. Set here, as the pops below should not read each job again.
    rigid = bytearray(len(jobs))
    for k, job in enumerate(jobs):
        kept = job.jump
        if kept is not None:
            # A kept job's jump, worked out when it was weighed (`_Job.keep_jump`).
            rigid[k] = 1
            gain, jid, c = kept
            if c <= free:
                append((gain, jid, k, c))
            continue
        counts = job.counts
        if len(counts) == 1:
            rigid[k] = 1
            # best_jump(k, free), inline for the thousands of waiting jobs a pass may weigh.
            c = counts[0]
            if 0 < c <= free:
                gain = (job.values[c] - 0.0) / c
                if gain > 1e-15:
                    append((-gain, job.view.id, k, c))
            continue
        jump = best_jump(k, free)
        if jump is not None:
            append((-jump[0], job.view.id, k, jump[1]))
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    while heap and free > 0:
        _, jid, k, c = pop(heap)
        if rigid[k]:
            # No other jump (`best_jump` gives None): not asked again.
            if c <= free:
                free -= c
                alloc[k] = c
            continue
        if c - alloc[k] > free:
            jump = best_jump(k, free)
            if jump is not None:
                push(heap, (-jump[0], jid, k, jump[1]))
            continue
        free -= c - alloc[k]
        alloc[k] = c
        jump = best_jump(k, free)
        if jump is not None:
            push(heap, (-jump[0], jid, k, jump[1]))
    return alloc


def _place(view: ClusterView, jobs: list[_Job], target: list[int]) -> list[Decision]:
    """Turn counts into placements and decisions."""
    pool = FreePool(view)
    # Only the jobs that hold GPUs or get some matter; found in C, as a pass may
    # weigh thousands of waiting jobs that get none.
    every = range(len(jobs))
    holding = list(compress(every, map(_CURRENT, jobs)))
    for k in holding:
        if target[k] != jobs[k].current:
            pool.release(jobs[k].view)
    # Largest count first, then most value, then job id (a total order, whatever
    # order the jobs came in); sorted as tuples, each with its index last (what a
    # stable sort of the indices by the rest gives).
    ranked = [
        (-target[k], -j.values.get(target[k], 0.0), j.view.id, k)  # (`_Job.value`, inline)
        for k in compress(every, target)
        if target[k] != (j := jobs[k]).current
    ]
    ranked.sort()
    preempts: list[Decision] = []
    resizes: list[Decision] = []
    starts: list[Decision] = []
    for _, _, _, k in ranked:
        j = jobs[k]
        placement: Placement | None = None
        for c in reversed(j.counts):
            if c > target[k]:
                continue
            if c == j.current:
                break
            placement = pool.pack(j.view, c)
            if placement is not None:
                break
        old = j.view.placement
        if placement is None and old is not None and can_retake(pool, j.view, old):
            placement = old
        if placement is None:
            if j.current:
                preempts.append(Preempt(j.view.id))
            continue
        pool.take(j.view, placement)
        if not j.current:
            starts.append(Start(j.view.id, placement))
        elif placement != j.view.placement:
            resizes.append(Resize(j.view.id, placement))
    for k in holding:
        if target[k] == 0:
            preempts.append(Preempt(jobs[k].view.id))
    starts.extend(_cpu_tasks(view, pool))
    # Sorted as by `_order` (a stable sort by kind, then job id), kind by kind.
    for kind in (preempts, resizes, starts):
        kind.sort(key=_JOB_ID)
    return preempts + resizes + starts


_CURRENT = attrgetter("current")
_UNKNOWN = attrgetter("unknown")
_JOB_ID = attrgetter("job_id")
_ENTRY = itemgetter(1)
_WEIGHT = itemgetter(2)


def _cpu_tasks(view: ClusterView, pool: FreePool) -> list[Decision]:
    """Jobs that ask for no GPU (CPU-only tasks) start wherever their CPUs and memory fit."""
    decisions: list[Decision] = []
    for task in view.pending:
        # task.most_gpus == 0, inline: this reads every waiting job.
        if (task.gpus if task.max_gpus is None else task.max_gpus) == 0:
            placement = pool.pack(task, 0)
            if placement is not None:
                pool.take(task, placement)
                decisions.append(Start(task.id, placement))
    return decisions


def _order(d: Decision) -> tuple[int, int]:
    rank = 0 if isinstance(d, Preempt) else 1 if isinstance(d, Resize) else 2
    return rank, d.job_id
