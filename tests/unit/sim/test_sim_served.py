"""A queue's GPU-time counts towards its share only for jobs that fit its
guarantee (issue 32; `Tenancy.served`): a team whose large job ran on
borrowed GPUs, which it could not have run alone, is not thereby "ahead",
and its small jobs take their guarantee back when they come."""

from __future__ import annotations

from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy
from schedulearn.core.registry import create
from schedulearn.sim.cluster import parse_cluster
from schedulearn.sim.engine import Simulator
from schedulearn.sim.jobs import SimJob, Workload

QUEUES = Tenancy((Queue.of("a", 2), Queue.of("b", 6)))


def test_a_large_borrowing_job_does_not_cost_its_team_the_guarantee() -> None:
    jobs = [
        # a's 4-GPU job (twice its guarantee) runs on borrowed GPUs until 5,000 s.
        SimJob(id=1, submitted_at=0.0, gpus=4, queue="a", duration=5_000.0),
        # b fills the rest, then the GPUs a's job leaves.
        *(
            SimJob(id=i, submitted_at=0.0, gpus=1, queue="b", duration=50_000.0)
            for i in range(2, 6)
        ),
        *(
            SimJob(id=i, submitted_at=5_001.0, gpus=1, queue="b", duration=50_000.0)
            for i in range(6, 10)
        ),
        # a's small job: within its guarantee.
        SimJob(id=10, submitted_at=5_100.0, gpus=1, queue="a", duration=600.0),
    ]
    policy = FairShare(create("fifo"), min_run=60.0)
    result = Simulator(
        Workload("served", tuple(jobs)), parse_cluster("1x8"), policy, tenancy=QUEUES
    ).run()
    small = next(r for r in result.records if r.id == 10)
    # It reclaims one of b's borrowed GPUs at once (b holds 8 of its 6). Were
    # the large job's 20,000 GPU-seconds counted, a would be "ahead" and its
    # job would wait until a fell behind with time (12,480 s, measured so).
    assert small.first_start is not None and small.first_start < 5_100.0 + 60.0, small
    assert result.summary.preemptions == 1
