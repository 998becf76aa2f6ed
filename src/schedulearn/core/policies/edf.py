"""EDF: earliest deadline first; jobs without a deadline come after those with
one, in arrival order; optionally a waiting job preempts running
preemptible jobs whose deadline is later. Source: earliest-deadline-first
(Liu and Layland, JACM 1973), global EDF on a multi-GPU cluster.

Rule in full, one pass: rank pending jobs by deadline, earliest first,
ties by arrival; then the jobs without a deadline in arrival order.
Start each job that fits (one node when it fits, else a gang over the
fewest nodes); a job that does not fit is skipped and later jobs may
still start, so GPUs do not idle behind a big job.

With `preempt=true` (default false), a waiting job with a deadline that
does not fit suspends running preemptible jobs with a later deadline (or
none), latest deadline first, as few as it needs. Preemption helps the
urgent job meet its deadline at the cost of a checkpoint and restore for
the suspended ones; leave it off when deadlines are soft. The policy
does not drop jobs whose deadline has passed: they keep their place at
the front, ranked by how late they are.
"""

from __future__ import annotations

from typing import ClassVar

from schedulearn.core.decisions import Decision, Start
from schedulearn.core.placement import FreePool
from schedulearn.core.policy import QueueOrder
from schedulearn.core.preemption import Victims
from schedulearn.core.registry import register
from schedulearn.core.views import ClusterView, JobView

_NONE = float("inf")
RULE = "earliest deadline first; jobs with no deadline after, in arrival order"


@register
class Edf:
    name: ClassVar[str] = "edf"
    tick_seconds: ClassVar[float | None] = None

    def __init__(self, preempt: bool = False) -> None:
        self.preempt = preempt

    def order(self, view: ClusterView) -> QueueOrder:
        with_deadline = sorted(
            (j for j in view.pending if j.deadline is not None),
            key=lambda j: (_deadline(j), j.submitted_at, j.id),
        )
        without = [j for j in view.pending if j.deadline is None]
        return QueueOrder((*with_deadline, *without), RULE)

    def decide(self, view: ClusterView) -> list[Decision]:
        if not view.pending:
            return []
        pool = FreePool(view)
        free = pool.total_free()
        if free == 0 and not self.preempt:
            return []
        victims: Victims | None = None  # built when a job with a deadline does not fit
        decisions: list[Decision] = []
        for job in self.order(view).jobs:
            placement = pool.pack(job) if job.gpus <= free else None
            if placement is not None:
                pool.take(job, placement)
                free -= placement.num_gpus
                decisions.append(Start(job.id, placement))
                continue
            if job.deadline is not None and self.preempt and victims is None:
                victims = _victims(view, pool)
            if job.deadline is None or victims is None or not victims.any():
                if free == 0:
                    break
                continue
            # Only jobs whose deadline is later than this one's may be suspended.
            room = victims.room_for(job, free, above=job.deadline)
            if room is None:
                continue
            decisions.extend(room.decisions)
            free = room.free
        return decisions


def _victims(view: ClusterView, pool: FreePool) -> Victims:
    """Preemptible running jobs, latest deadline (or none) first; among equals
    the one started last (least work since it began to lose)."""
    return Victims(view, pool, _deadline, lambda j: (-(j.started_at or 0.0), -j.id))


def _deadline(job: JobView) -> float:
    return _NONE if job.deadline is None else job.deadline
