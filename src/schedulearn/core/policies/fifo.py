"""FIFO: jobs start in arrival order and the head of the queue waits for room;
with `backfill=true`, EASY backfilling lets a later job start now if it
does not delay the head. Source: the original Schedulearn's FIFO; EASY
backfilling from Lifka (1995) and Mu'alem and Feitelson (2001).

Rule: take pending jobs oldest first. Place each with the shared packing
rule (one node when it fits, best fit; otherwise a gang over the fewest
nodes). When the head job does not fit, stop: later jobs wait behind it,
so no job is overtaken and none starves.

With `backfill=true` this becomes EASY backfilling (Lifka, "The ANL/IBM
SP scheduling system", 1995; Mu'alem and Feitelson, 2001): the blocked
head job gets a reservation at the earliest time enough GPUs free up
(from running jobs' estimated remaining times), and a later job may jump
ahead only if it fits now and either ends before that reservation or
uses GPUs the head job will not need. A job's time limit (`--time`)
stands for its estimate when it has none, and bounds one it has (it is
stopped there: `JobView.expected_duration`). Jobs with neither are never
backfilled (they could delay the head job without bound).

Source: the original Schedulearn's FIFO (first GPUs free, in order).
"""

from __future__ import annotations

from typing import ClassVar

from schedulearn.core.decisions import Decision, Start
from schedulearn.core.placement import FreePool
from schedulearn.core.policy import QueueOrder, arrival_order
from schedulearn.core.registry import register
from schedulearn.core.views import ClusterView, JobView


@register
class Fifo:
    name: ClassVar[str] = "fifo"
    tick_seconds: ClassVar[float | None] = None

    def __init__(self, backfill: bool = False) -> None:
        self.backfill = backfill

    def order(self, view: ClusterView) -> QueueOrder:
        if self.backfill:
            return arrival_order(
                view,
                "arrival order; the head waits for room, later jobs that would not delay it "
                "may start first (EASY backfilling)",
            )
        return arrival_order(view, "arrival order; the head of the queue waits for room")

    def decide(self, view: ClusterView) -> list[Decision]:
        if not view.pending:
            return []
        pool = FreePool(view)
        decisions: list[Decision] = []
        free = pool.total_free()
        pending = self.order(view).jobs
        for i, job in enumerate(pending):
            if job.gpus > free:
                blocked = job
            else:
                placement = pool.pack(job)
                if placement is not None:
                    pool.take(job, placement)
                    free -= placement.num_gpus
                    decisions.append(Start(job.id, placement))
                    continue
                blocked = job
            if self.backfill:
                decisions.extend(self._backfill(view, pool, blocked, pending[i + 1 :], free))
            break
        return decisions

    def _backfill(
        self,
        view: ClusterView,
        pool: FreePool,
        head: JobView,
        later: tuple[JobView, ...],
        free: int,
    ) -> list[Decision]:
        shadow, extra = _reservation(view, head, free)
        decisions: list[Decision] = []
        for job in later:
            # The estimate, or the user's time limit when there is none.
            expected = job.expected_duration
            if job.gpus > free or expected is None:
                continue
            ends_in_time = view.now + expected <= shadow
            if not ends_in_time and job.gpus > extra:
                continue
            placement = pool.pack(job)
            if placement is None:
                continue
            pool.take(job, placement)
            free -= placement.num_gpus
            if not ends_in_time:
                extra -= placement.num_gpus
            decisions.append(Start(job.id, placement))
        return decisions


def _reservation(view: ClusterView, head: JobView, free: int) -> tuple[float, int]:
    """When the head job can start (the shadow time) and how many GPUs will
    be spare then, counting only GPUs freed by running jobs' estimated ends.

    The count is cluster-wide; the head job's node-shape needs are not
    modelled, so a backfilled job is also checked against `extra`.
    """
    ends = sorted(
        (view.now + (job.remaining_at(view.now) or 0.0), job.allocated_gpus)
        for job in view.running
        if job.expected_duration is not None
    )
    available = free
    for when, gpus in ends:
        available += gpus
        if available >= head.gpus:
            return when, available - head.gpus
    # Some running jobs have no estimate: the shadow time is unknown, so
    # backfilling could delay the head job. Backfill nothing.
    return float("-inf"), 0
