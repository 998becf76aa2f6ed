"""The fair-share layer over a replay: guarantees reached under a backlog,
idle GPUs lent and given back, plain jobs never starved by queues, and the
same replay twice gives the same result (issue 32)."""

from __future__ import annotations

from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy
from schedulearn.core.registry import create
from schedulearn.sim.cluster import parse_cluster
from schedulearn.sim.engine import Simulator
from schedulearn.sim.jobs import SimJob, Workload
from schedulearn.sim.results import SimResult

QUEUES = Tenancy((Queue.of("a", 4), Queue.of("b", 2), Queue.of("c", 2)))


def backlog(queue: str, first_id: int, count: int, at: float = 0.0) -> list[SimJob]:
    """`count` 1-GPU jobs of 600 s each, all waiting from `at`."""
    return [
        SimJob(id=first_id + i, submitted_at=at, gpus=1, queue=queue, duration=600.0)
        for i in range(count)
    ]


def replay(jobs: list[SimJob], spec: str = "fifo", tenancy: Tenancy = QUEUES) -> SimResult:
    jobs.sort(key=lambda j: (j.submitted_at, j.id))
    workload = Workload("share", tuple(jobs))
    policy = FairShare(create(spec), min_run=60.0)
    return Simulator(
        workload, parse_cluster("2x4"), policy, record_segments=True, tenancy=tenancy
    ).run()


def gpu_seconds(result: SimResult, queue: str, start: float, end: float) -> float:
    queue_of = {r.id: r.queue for r in result.records}
    return sum(
        s.placement.num_gpus * max(0.0, min(s.end, end) - max(s.start, start))
        for s in result.segments
        if queue_of[s.job_id] == queue
    )


def test_each_queue_with_a_backlog_gets_its_guarantee() -> None:
    # a arrives first and borrows all 8 GPUs; b and c arrive at 1,000 s with
    # backlogs of their own: after min_run they take their 2 GPUs each back.
    jobs = backlog("a", 0, 60) + backlog("b", 100, 30, 1000.0) + backlog("c", 200, 30, 1000.0)
    for spec in ("fifo", "tiresias", "srtf"):
        result = replay(list(jobs), spec)
        window = (1200.0, 6000.0)  # every queue has waiting work throughout
        span = window[1] - window[0]
        for name, guaranteed in (("a", 4), ("b", 2), ("c", 2)):
            got = gpu_seconds(result, name, *window)
            assert got >= 0.95 * guaranteed * span, (spec, name, got / span)


def test_idle_gpus_are_lent_and_given_back() -> None:
    # a alone for 1,000 s holds all 8 GPUs (borrowing b's and c's 4); once b
    # and c want theirs, a is down to its guarantee within min_run + 600 s.
    jobs = backlog("a", 0, 60) + backlog("b", 100, 30, 1000.0) + backlog("c", 200, 30, 1000.0)
    result = replay(jobs)
    assert gpu_seconds(result, "a", 0.0, 600.0) == 8 * 600.0
    assert gpu_seconds(result, "a", 1700.0, 2300.0) <= 4 * 600.0 + 1e-6


def test_plain_jobs_run_once_queues_exist() -> None:
    # One queue guaranteed 2 of 8 GPUs and busy: jobs that name no queue
    # (non-preemptible) run on the 6 GPUs `default` owns, and all finish.
    tenancy = Tenancy((Queue.of("team-a", 2),))
    plain = [
        SimJob(id=i, submitted_at=0.0, gpus=1, duration=600.0, preemptible=False) for i in range(12)
    ]
    result = replay(plain + backlog("team-a", 100, 20), tenancy=tenancy)
    assert result.summary.unfinished == 0
    assert gpu_seconds(result, "", 0.0, 600.0) >= 6 * 600.0


def test_a_replay_is_deterministic() -> None:
    jobs = backlog("a", 0, 30) + backlog("b", 100, 20, 500.0) + backlog("c", 200, 20, 700.0)
    first, second = replay(list(jobs), "tiresias"), replay(list(jobs), "tiresias")
    assert first.segments == second.segments
