"""Why a queue's sharing-incentive ratio misses 1.05, for bench/fairness.py.

The ratio is the queue's mean JCT in the shared run over its mean JCT
alone (its jobs that fit its guarantee, under the plain policy, on a
cluster of exactly its guaranteed GPUs). `ratio_line` replays that alone
run again (a few dozen jobs: cheap) to compare it with the shared run job
by job: how long the jobs waited to first start, how long they took from
their first start to their end against their work at full speed on one
node (time suspended, restarts, and GPUs spread over nodes), and how
often they were preempted. It says what that makes the miss:

- the guarantee is kept over time to within its marks (a queue is
  protected once it has had less than `OWED_AT` of the GPU-time it was
  owed, or `AHEAD_AT` of its fraction): a team with a backlog can be held
  near the mark, so its queued jobs get as little as that share of its
  guarantee, and wait or are suspended longer than alone: the rule's
  limit, not one of construction;
- a job of several GPUs alone on its team's whole nodes always gets one
  node; in a shared cluster the GPUs freed for it may be on several
  nodes, and it runs slower there (the simulator's spread penalty):
  the placement's limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedulearn.core.fairshare_fill import AHEAD_AT, OWED_AT
from schedulearn.core.fairshare_queues import Tenancy
from schedulearn.core.registry import create
from schedulearn.sim.cluster import ClusterSpec
from schedulearn.sim.engine import Simulator
from schedulearn.sim.jobs import Workload
from schedulearn.sim.results import JobRecord, SimResult
from schedulearn.sim.runner import SpeedOptions
from schedulearn.sim.tenants import QueueFairness, alone_cluster, queue_workload

_H = 3600.0


@dataclass(frozen=True, slots=True)
class Split:
    """Mean hours a job of the compared set: to first start, first start to
    end, its work at full speed; and mean preemptions."""

    wait: float
    after: float
    work: float
    preemptions: float

    @property
    def lost(self) -> float:
        """Hours after the first start beyond the work: suspended or slowed."""
        return self.after - self.work


def split(records: list[JobRecord]) -> Split:
    """The mean `Split` of finished `records`."""
    done = [r for r in records if r.end is not None and r.first_start is not None]
    n = max(1, len(done))
    return Split(
        sum((r.first_start or 0.0) - r.submitted_at for r in done) / n / _H,
        sum((r.end or 0.0) - (r.first_start or 0.0) for r in done) / n / _H,
        sum(r.isolated for r in done) / n / _H,
        sum(r.preemptions for r in done) / n,
    )


def alone_run(
    workload: Workload,
    cluster: ClusterSpec,
    tenancy: Tenancy,
    spec: str,
    queue: str,
    speed: SpeedOptions | None = None,
) -> SimResult | None:
    """The queue's alone run again (as `tenant_runs.run_tenants` makes it)."""
    shape = alone_cluster(tenancy.queue(queue), cluster)
    if shape is None:
        return None
    own = queue_workload(workload, queue, shape.total_gpus)
    if not len(own):
        return None
    model = (speed or SpeedOptions()).build([own])
    return Simulator(own, shape, create(spec), model, record_segments=False).run()


def ratio_line(
    worst: QueueFairness,
    was: float | None,
    shared: SimResult,
    alone: SimResult | None,
) -> str:
    """The `limit:` line for the worst ratio: where the queue's JCT went, shared
    against alone, and whose limit that is (module doc)."""
    head = (
        f"ratio: worst is queue {worst.queue} ({worst.ratio or 0.0:.3f}; plain "
        + ("-" if was is None else f"{was:.3f}")
        + ")"
    )
    marks = (
        f"a guarantee is kept over time, not at every instant: a team is protected once "
        f"it has had less than {OWED_AT:.0%} of the GPU-time it was owed, or "
        f"{AHEAD_AT:.0%} of its fraction, so one with a backlog may be held near that "
        f"mark and its queued jobs get that share of its guarantee"
    )
    if alone is None:
        return f"{head}: {marks}: a rule's limit, not one of construction"
    ids = {r.id for r in alone.records}
    mine = split([r for r in shared.records if r.id in ids])
    solo = split(list(alone.records))
    sizes = sorted({r.gpus for r in alone.records})
    size = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]}"
    each = f"{size} GPU{'' if size == '1' else 's'} each"
    out = (
        f"{head}: its {len(ids)} jobs that fit its {worst.guaranteed} GPUs ({each}) took "
        f"{mine.wait + mine.after:,.1f} h on average against {solo.wait + solo.after:,.1f} h "
        f"alone: {mine.wait:,.1f} h to their first start (alone {solo.wait:,.1f}), then "
        f"{mine.after:,.1f} h to their end (alone {solo.after:,.1f}) for {mine.work:,.1f} h "
        f"of work, {mine.preemptions:,.1f} preemptions a job (alone {solo.preemptions:,.1f})"
    )
    causes = []
    if mine.wait > 1.05 * solo.wait or mine.lost > 1.05 * solo.lost:
        causes.append(f"waiting or suspended: {marks} (a rule's limit)")
    if sizes[-1] > 1 and mine.lost > 1.05 * solo.lost:
        causes.append(
            f"slowed after their start ({mine.lost:,.1f} h a job beyond its work, alone "
            f"{solo.lost:,.1f}): suspended, restarted, or on GPUs spread over more nodes "
            "than alone, where a job runs slower (alone, it competes for its team's nodes "
            "only; shared, the GPUs freed for it may lie on several: the placement's limit)"
        )
    why = "; ".join(causes) or "no one cause stands out"
    return f"{out}. Why: {why}; not one of construction"
