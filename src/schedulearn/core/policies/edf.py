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

from bisect import bisect_left
from itertools import islice
from typing import ClassVar

from schedulearn.core.decisions import Decision, Preempt, Start
from schedulearn.core.placement import FreePool
from schedulearn.core.policies._room import make_room
from schedulearn.core.registry import register
from schedulearn.core.views import ClusterView, JobView

_NONE = float("inf")


@register
class Edf:
    name: ClassVar[str] = "edf"
    tick_seconds: ClassVar[float | None] = None

    def __init__(self, preempt: bool = False) -> None:
        self.preempt = preempt

    def decide(self, view: ClusterView) -> list[Decision]:
        if not view.pending:
            return []
        pool = FreePool(view)
        free = pool.total_free()
        if free == 0 and not self.preempt:
            return []
        # Built only when a job with a deadline does not fit.
        victims: list[JobView] | None = None if self.preempt else []
        with_deadline = sorted(
            (j for j in view.pending if j.deadline is not None),
            key=lambda j: (_deadline(j), j.submitted_at, j.id),
        )
        without = [j for j in view.pending if j.deadline is None]
        decisions: list[Decision] = []
        for job in with_deadline + without:
            placement = pool.pack(job) if job.gpus <= free else None
            if placement is not None:
                pool.take(job, placement)
                free -= placement.num_gpus
                decisions.append(Start(job.id, placement))
                continue
            if victims is None and job.deadline is not None:
                victims = _victims(view)
            if job.deadline is None or not victims:
                if free == 0:
                    break
                continue
            # Victims are sorted latest deadline first: the eligible ones are a prefix.
            eligible = bisect_left(victims, -job.deadline, key=lambda v: -_deadline(v))
            room = make_room(pool, job, islice(victims, eligible), free) if eligible else None
            if room is None:
                continue
            placement, used = room
            for victim in used:
                decisions.append(Preempt(victim.id))
                free += victim.allocated_gpus
            free -= placement.num_gpus
            gone = {v.id for v in used}
            victims = [v for v in victims if v.id not in gone]
            decisions.append(Start(job.id, placement))
        return decisions


def _victims(view: ClusterView) -> list[JobView]:
    """Preemptible running jobs, latest deadline first (none is latest); among
    equals the one started last (least work since it began to lose)."""
    return sorted(
        (j for j in view.running if j.preemptible),
        key=lambda j: (-_deadline(j), -(j.started_at or 0.0), -j.id),
    )


def _deadline(job: JobView) -> float:
    return _NONE if job.deadline is None else job.deadline
