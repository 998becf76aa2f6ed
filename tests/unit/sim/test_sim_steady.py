"""Ticks a policy says cannot change anything are skipped, and the replay is
the same: tiresias (`steady_until`: its next threshold or starvation) and the
fair-share layer over it, against the same policies with the answer hidden."""

from __future__ import annotations

from typing import ClassVar

import pytest

from schedulearn.core.decisions import Decision
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy
from schedulearn.core.policy import Policy, QueueOrder
from schedulearn.core.registry import create
from schedulearn.core.views import ClusterView
from schedulearn.sim.cluster import parse_cluster
from schedulearn.sim.engine import Simulator
from schedulearn.sim.jobs import SimJob, Workload
from schedulearn.sim.results import SimResult


class Hidden:
    """`policy` without `steady_until`: the host asks it at every tick."""

    name: ClassVar[str] = "hidden"
    tick_seconds: ClassVar[float | None] = None  # the wrapped policy's, set per instance

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        setattr(self, "tick_seconds", policy.tick_seconds)  # noqa: B010 (mypy reads ClassVar)

    def decide(self, view: ClusterView) -> list[Decision]:
        return self.policy.decide(view)

    def order(self, view: ClusterView) -> QueueOrder:
        return self.policy.order(view)


def workload() -> Workload:
    """Long and short jobs of three queues arriving over a day, on too few GPUs:
    long jobs cross tiresias's threshold while others wait, short ones preempt."""
    jobs = []
    for i in range(60):
        long = i % 5 == 0
        jobs.append(
            SimJob(
                id=i,
                submitted_at=i * 1500.0,
                gpus=(1, 2, 4)[i % 3],
                queue=("a", "b", "c")[i % 3],
                duration=40_000.0 if long else 900.0 + 100.0 * (i % 7),
            )
        )
    return Workload("steady", tuple(jobs))


QUEUES = Tenancy((Queue.of("a", 4), Queue.of("b", 2), Queue.of("c", 2)))


def replay(policy: Policy, tenancy: Tenancy | None) -> tuple[SimResult, int]:
    sim = Simulator(workload(), parse_cluster("2x4"), policy, tenancy=tenancy)
    result = sim.run()
    return result, sim.passes


@pytest.mark.parametrize("queues", [False, True], ids=["plain", "fair-share"])
def test_skipped_ticks_leave_the_replay_unchanged(queues: bool) -> None:
    tiresias = "tiresias:threshold=3600"  # a threshold the long jobs cross
    tenancy = QUEUES if queues else None

    def build(hide: bool) -> Policy:
        # Hidden at both levels: the layer's own memo asks the inner policy too.
        inner: Policy = Hidden(create(tiresias)) if hide else create(tiresias)
        policy: Policy = FairShare(inner, min_run=60.0) if queues else inner
        return Hidden(policy) if hide else policy

    skipping, fewer = replay(build(False), tenancy)
    every, all_ticks = replay(build(True), tenancy)
    assert skipping.summary.preemptions > 0  # the thresholds mattered
    assert [(r.id, r.first_start, r.end, r.preemptions) for r in skipping.records] == [
        (r.id, r.first_start, r.end, r.preemptions) for r in every.records
    ]
    assert fewer < all_ticks / 2, (fewer, all_ticks)


def test_no_ticks_while_nobody_waits() -> None:
    # Jobs that fit at once, one of them past tiresias's threshold (16
    # GPU-hours) after 4 hours: with nobody waiting there is nothing to start
    # or suspend, however long they run, so the replay passes only at
    # arrivals and ends and at the first tick after each (asked then).
    jobs = (
        SimJob(id=0, submitted_at=0.0, gpus=3, duration=100_000.0),
        SimJob(id=1, submitted_at=100.0, gpus=1, duration=30_000.0),
    )
    results = {}
    for hide in (False, True):
        policy: Policy = Hidden(create("tiresias")) if hide else create("tiresias")
        sim = Simulator(Workload("nobody-waits", jobs), parse_cluster("1x4"), policy)
        results[hide] = (sim.run(), sim.passes)
    (quiet, passes), (ticking, every) = results[False], results[True]
    assert passes <= 8, passes  # two arrivals, two ends, a tick after each
    assert every > 1000  # asked at every 60 s tick: the same replay
    assert [(r.id, r.first_start, r.end) for r in quiet.records] == [
        (r.id, r.first_start, r.end) for r in ticking.records
    ]


def test_the_layer_over_an_untimed_policy_skips_ticks_while_nobody_waits() -> None:
    """srtf has no tick; the layer ticks every `min_run` for its reclaims. With
    nothing waiting (sparse arrivals, GPUs to spare) those ticks cannot start
    anything: they are skipped until the next event, with the same replay."""
    sparse = Workload(
        "sparse",
        tuple(
            SimJob(id=i, submitted_at=i * 20_000.0, gpus=2, queue="ab"[i % 2], duration=5_000.0)
            for i in range(20)
        ),
    )
    tenancy = Tenancy((Queue.of("a", 4), Queue.of("b", 4)))

    def run(policy: Policy) -> tuple[SimResult, int]:
        sim = Simulator(sparse, parse_cluster("2x4"), policy, tenancy=tenancy)
        return sim.run(), sim.passes

    skipping, fewer = run(FairShare(create("srtf"), min_run=60.0))
    every, all_ticks = run(Hidden(FairShare(create("srtf"), min_run=60.0)))
    assert [(r.id, r.first_start, r.end) for r in skipping.records] == [
        (r.id, r.first_start, r.end) for r in every.records
    ]
    assert all(r.end is not None for r in skipping.records)
    assert fewer < all_ticks / 10, (fewer, all_ticks)
