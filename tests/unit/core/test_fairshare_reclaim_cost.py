"""The reclaim asks the inner policy for its order only when a job can start.

A queue below its guarantee is walked in the inner policy's order
(`fairshare_reclaim`); on a contended cluster most passes find nothing
to take (no free GPUs, no job that has run `min_run`), and ranking the
queue's backlog then costs the whole pass for nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from core_scenario import Scenario, job, node, starts

from schedulearn.core import ClusterView, create
from schedulearn.core.decisions import Decision
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy
from schedulearn.core.policy import QueueOrder

TWO = Tenancy((Queue.of("A", 2), Queue.of("B", 2)))


class CountingFifo:
    """fifo, counting how often it is asked for its order."""

    name: ClassVar[str] = "counting-fifo"
    tick_seconds: ClassVar[float | None] = None

    def __init__(self) -> None:
        self.inner = create("fifo")
        self.orders = 0

    def order(self, view: ClusterView) -> QueueOrder:
        self.orders += 1
        return self.inner.order(view)

    def decide(self, view: ClusterView) -> list[Decision]:
        return self.inner.decide(view)


def test_no_order_is_asked_while_nothing_can_be_taken_back_and_one_once_it_can() -> None:
    # A holds all 4 GPUs (2 borrowed), started at 950; B, guaranteed 2, waits.
    sc = Scenario(node("n", 4))
    for i in range(4):
        sc.run(job(i, 1, queue="A", preemptible=True), {"n": [i]}, started_at=950.0)
    b = [job(10 + i, 1, queue="B", preemptible=True) for i in range(3)]
    inner = CountingFifo()
    fs = FairShare(inner, min_run=60)
    # Before min_run no GPU is free or takeable: the reclaim does not rank B's jobs.
    assert fs.decide(replace(sc.view(1000.0, b), tenancy=TWO)) == []
    assert inner.orders == 0
    # Once A's jobs have run min_run, B takes its two GPUs back, in fifo's order.
    decisions = fs.decide(replace(sc.view(1010.0, b), tenancy=TWO))
    assert set(starts(decisions)) == {10, 11}
    assert inner.orders >= 1
