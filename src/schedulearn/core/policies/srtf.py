"""SRTF: shortest remaining estimated time first; a waiting job whose remaining
time is clearly shorter preempts longer-running preemptible jobs. Source:
shortest-remaining-time-first (Schrage, 1968), the "shortest" baseline of
Tiresias (Gu et al., NSDI'19) for DL jobs.

Rule in full, one pass: rank pending jobs by estimated remaining time
(`JobView.remaining_at(now)`), shortest first; jobs with no estimate rank
last, in arrival order. Start each job that fits (one node when it fits,
else a gang over the fewest nodes); a job that does not fit is skipped
and later, longer jobs may still start (the policy keeps GPUs busy
rather than reserve them). When preemption is on (`preempt`, default
true), a job that does not fit may suspend running preemptible jobs
whose remaining time is clearly longer than its own, longest remaining
first, as few as it needs. A running job with no estimate counts as
infinitely long.

"Clearly" avoids thrashing: a victim must have more than
`(1 + margin) x` the waiting job's remaining time and at least
`min_gain` seconds more (defaults 0.2 and 60 s), so that suspending and
resuming, which costs a checkpoint and restore, buys a real gain. A job
without an estimate never preempts anyone.
"""

from __future__ import annotations

from typing import ClassVar

from schedulearn.core.decisions import Decision, Start
from schedulearn.core.placement import FreePool, stuck
from schedulearn.core.policies.srtf_ranks import RankedWaiting
from schedulearn.core.policy import QueueOrder
from schedulearn.core.preemption import Victims
from schedulearn.core.registry import register
from schedulearn.core.views import ClusterView, JobView

_NEVER = float("inf")
RULE = "shortest remaining estimated time first; jobs with no estimate last, in arrival order"


@register
class Srtf:
    name: ClassVar[str] = "srtf"
    tick_seconds: ClassVar[float | None] = None

    def __init__(self, preempt: bool = True, margin: float = 0.2, min_gain: float = 60.0) -> None:
        if margin < 0 or min_gain < 0:
            raise ValueError(
                f"srtf: margin and min_gain must be 0 or more, not {margin} and {min_gain}"
            )
        self.preempt = preempt
        self.margin = float(margin)
        self.min_gain = float(min_gain)
        # The waiting jobs sorted by rank, kept across passes (a cache, `srtf_ranks`).
        self._ranked = RankedWaiting()

    def order(self, view: ClusterView) -> QueueOrder:
        known = self._ranked.order(view.pending)
        if known is not None:
            return QueueOrder(tuple(known), RULE)
        now = view.now
        # Ranks end in the job's id, which is unique: the sort never compares views.
        ranked = sorted((*_rank(j, now), j) for j in view.pending)
        return QueueOrder(tuple(r[-1] for r in ranked), RULE)

    def decide(self, view: ClusterView) -> list[Decision]:
        if not view.pending:
            return []
        now = view.now
        pool = FreePool(view)
        free = pool.total_free()
        if (free == 0 and not self.preempt) or stuck(view, free):
            return []
        victims: Victims | None = None  # built when a job does not fit
        decisions: list[Decision] = []
        for job in self.order(view).jobs:
            placement = pool.pack(job) if job.gpus <= free else None
            if placement is not None:
                pool.take(job, placement)
                free -= placement.num_gpus
                decisions.append(Start(job.id, placement))
                continue
            remaining = job.remaining_at(now)
            if remaining is not None and self.preempt and victims is None:
                victims = _victims(view, pool)
            if remaining is None or victims is None or not victims.any():
                if free == 0:
                    break
                continue
            bound = max(remaining * (1.0 + self.margin), remaining + self.min_gain)
            if not victims.any(above=bound):
                # Later jobs are longer: no one else can preempt either.
                if free == 0:
                    break
                continue
            room = victims.room_for(job, free, above=bound)
            if room is None:
                continue
            decisions.extend(room.decisions)
            free = room.free
        return decisions


def _victims(view: ClusterView, pool: FreePool) -> Victims:
    """Preemptible running jobs, longest remaining time first (none is longest);
    among equals the one started last (least work since it began to lose)."""
    now = view.now
    return Victims(
        view, pool, lambda j: _remaining(j, now), lambda j: (-(j.started_at or 0.0), -j.id)
    )


def _remaining(job: JobView, now: float) -> float:
    remaining = job.remaining_at(now)
    return _NEVER if remaining is None else remaining


def _rank(job: JobView, now: float) -> tuple[bool, float, float, int]:
    remaining = job.remaining_at(now)
    return (remaining is None, remaining or 0.0, job.submitted_at, job.id)
