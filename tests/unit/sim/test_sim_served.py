"""A queue's GPU-time counts towards its share only for jobs that fit its
guarantee (issue 32; `Tenancy.served`): a team whose large job ran on
borrowed GPUs, which it could not have run alone, is not thereby "ahead",
and its small jobs take their guarantee back when they come."""

from __future__ import annotations

from schedulearn.core.decisions import Decision
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy
from schedulearn.core.registry import create
from schedulearn.core.views import ClusterView
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


class _Spy(FairShare):
    """The layer, recording what each pass's snapshot says each queue was served and owed."""

    def __init__(self) -> None:
        super().__init__(create("fifo"), min_run=60.0)
        self.seen: list[tuple[float, dict[str, float], dict[str, float]]] = []

    def decide(self, view: ClusterView) -> list[Decision]:
        t = view.tenancy
        assert t is not None and t.served is not None and t.owed is not None
        self.seen.append((view.now, dict(t.served), dict(t.owed)))
        return super().decide(view)


def test_a_queue_is_owed_what_its_guarantee_alone_would_have_given_its_jobs() -> None:
    # `Tenancy.owed`: the GPUs a's jobs that fit its 2 asked for, at most 2, over
    # time (no decay here). Its 4-GPU job, larger than the guarantee, is owed
    # nothing; nor is a while it wants nothing (1,000-2,000 s).
    jobs = [
        SimJob(id=1, submitted_at=0.0, gpus=1, queue="a", duration=1_000.0),
        SimJob(id=2, submitted_at=0.0, gpus=4, queue="a", duration=500.0),
        *(
            SimJob(id=i, submitted_at=2_000.0, gpus=1, queue="a", duration=1_000.0)
            for i in (3, 4, 5)
        ),
    ]
    spy = _Spy()
    queues = Tenancy((Queue.of("a", 2), Queue.of("b", 6)), half_life=None)
    Simulator(Workload("owed", tuple(jobs)), parse_cluster("1x8"), spy, tenancy=queues).run()
    now, served, owed = max(spy.seen, key=lambda s: s[0])
    assert now == 3_000.0
    # 1 GPU for 1,000 s, then 3 GPUs for 1,000 s, of which 2 were owed.
    assert served["a"] == 4_000.0 and owed["a"] == 3_000.0
    assert owed.get("b", 0.0) == 0.0
