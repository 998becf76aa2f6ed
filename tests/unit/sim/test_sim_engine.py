"""The engine on tiny scenarios whose completion times are worked out by hand."""

from __future__ import annotations

from typing import ClassVar

import pytest

from schedulearn.core import create
from schedulearn.core.views import JobView, Placement
from schedulearn.sim import LinearSpeed, SimInputError, SimJob, Workload, parse_cluster, simulate
from schedulearn.sim.results import SimResult
from schedulearn.sim.runstate import running_view, stopped_view


def jobs(*specs: tuple[float, int, float]) -> Workload:
    """Jobs from (submit, gpus, duration), ids 0, 1, 2, ..."""
    return Workload("hand", tuple(SimJob(i, s, g, d) for i, (s, g, d) in enumerate(specs)))


def ends(result: SimResult) -> dict[int, float | None]:
    return {r.id: r.end for r in result.records}


def test_fifo_queues_the_second_job_until_the_first_ends() -> None:
    # 1 node of 4 GPUs. Job 0 (2 GPUs, 100 s) starts at 0; job 1 (4 GPUs) must
    # wait for it; job 2 (4 GPUs, 10 s) arrives at 10 and waits behind job 1.
    r = simulate(jobs((0, 2, 100), (0, 4, 50), (10, 4, 10)), parse_cluster("1x4"), create("fifo"))
    assert ends(r) == {0: 100.0, 1: 150.0, 2: 160.0}
    s = r.summary
    assert s.makespan == 160.0
    assert s.mean_jct == pytest.approx((100 + 150 + 150) / 3)
    assert s.mean_queueing_delay == pytest.approx((0 + 100 + 140) / 3)
    # Busy GPU-seconds: 2x100 + 4x50 + 4x10 = 440 of 4x160 = 640.
    assert s.gpu_utilisation == pytest.approx(440 / 640)


def test_jobs_run_side_by_side_when_they_fit() -> None:
    r = simulate(jobs((0, 1, 30), (5, 2, 10), (5, 1, 20)), parse_cluster("1x4"), create("fifo"))
    assert ends(r) == {0: 30.0, 1: 15.0, 2: 25.0}
    assert r.summary.mean_queueing_delay == 0.0


def test_preemption_costs_the_restart_time_and_keeps_progress() -> None:
    # One GPU. Tiresias with a 100 GPU-second threshold: job 0 (1000 s) has
    # 200 GPU-s when job 1 (50 s) arrives at 200, so job 1 preempts it and
    # ends at 250; job 0 resumes at 250, pays the 30 s restart and runs its
    # last 800 s: it ends at 250 + 30 + 800 = 1080.
    policy = create("tiresias:threshold=100:starvation_factor=0")
    speed = LinearSpeed(restart_cost=30.0)
    r = simulate(jobs((0, 1, 1000), (200, 1, 50)), parse_cluster("1x1"), policy, speed)
    assert ends(r) == {0: 1080.0, 1: 250.0}
    assert r.summary.preemptions == 1
    reasons = [(s.job_id, s.start, s.end, s.end_reason) for s in r.segments]
    assert reasons == [
        (0, 0.0, 200.0, "preempted"),
        (1, 200.0, 250.0, "completed"),
        (0, 250.0, 1080.0, "completed"),
    ]


def test_preempted_during_the_restart_makes_no_progress() -> None:
    # Time slicing with a 40 s quantum on one GPU and a 30 s restart cost:
    # two 100 s jobs take turns; a slice first pays 30 s (except job 0's
    # first start, which is free), so each slice of 40-ish s does ~10 s of work.
    r = simulate(
        jobs((0, 1, 100), (0, 1, 100)),
        parse_cluster("1x1"),
        create("timeslice:quantum=40"),
        LinearSpeed(restart_cost=30.0),
    )
    for s in r.segments:
        assert s.end > s.start
    # Work done adds up to each job's duration exactly.
    for jid in (0, 1):
        segs = [s for s in r.segments if s.job_id == jid]
        work = sum(s.end - s.start - (0.0 if i == 0 else 30.0) for i, s in enumerate(segs))
        assert work == pytest.approx(100.0)


def test_gang_spread_over_more_nodes_than_needed_runs_slower() -> None:
    speed = LinearSpeed(spread_penalty=0.5)
    from schedulearn.sim.speed import ClusterShape

    shape = ClusterShape.of(parse_cluster("2x4").nodes)
    job = SimJob(0, 0.0, 4, 100.0)
    one_node = Placement.single("n0", (0, 1, 2, 3))
    two_nodes = Placement.of({"n0": (0, 1), "n1": (0, 1)})
    assert speed.rate(job, one_node, shape) == 1.0
    assert speed.rate(job, two_nodes, shape) == pytest.approx(1 / 1.5)
    # Eight GPUs need both nodes: no penalty for the spread that cannot be avoided.
    big = SimJob(1, 0.0, 8, 100.0)
    both = Placement.of({"n0": range(4), "n1": range(4)})
    assert speed.rate(big, both, shape) == 1.0


def test_linear_scaling_efficiency_and_gpu_type_factors() -> None:
    from schedulearn.sim.speed import ClusterShape, TypeFactors

    cluster = parse_cluster("1x4:k80+1x4:v100")
    shape = ClusterShape.of(cluster.nodes)
    speed = LinearSpeed(efficiency=0.5, gpu_speed=TypeFactors.parse("k80=0.25,v100=1"))
    job = SimJob(0, 0.0, 2, 100.0)
    # speedup(n) = 1 + 0.5 (n - 1): 4 GPUs instead of 2 is 2.5 / 1.5 as fast.
    assert speed.rate(job, Placement.single("n1", range(4)), shape) == pytest.approx(2.5 / 1.5)
    assert speed.rate(job, Placement.single("n0", (0, 1)), shape) == pytest.approx(0.25)


def test_elastic_job_grows_and_its_work_accounts_for_the_speedup() -> None:
    # elastic-fifo starts the job at its minimum (1 GPU) and, once it is
    # min_age old, grows it one GPU per pass to 2. With efficiency 1 and a
    # 0 s restart, 2 GPUs finish the remaining work twice as fast.
    job = SimJob(0, 0.0, 1, 600.0, min_gpus=1, max_gpus=2)
    r = simulate(
        Workload("e", (job,)),
        parse_cluster("1x2"),
        create("elastic-fifo:min_age=60"),
        LinearSpeed(efficiency=1.0, restart_cost=0.0),
    )
    segs = r.segments
    assert [s.placement.num_gpus for s in segs] == [1, 2]
    grow = segs[0].end
    assert segs[1].end == pytest.approx(grow + (600.0 - grow) / 2)
    assert r.summary.resizes == 1


def test_tick_policies_are_not_called_while_the_cluster_is_idle() -> None:
    # Two jobs a day apart: a 60 s tick must not run through the idle day.
    r = simulate(jobs((0, 1, 10), (86_400, 1, 10)), parse_cluster("1x1"), create("tiresias"))
    assert ends(r) == {0: 10.0, 1: 86_410.0}
    assert r.passes < 10


def test_a_job_that_can_never_fit_is_refused_before_the_run() -> None:
    with pytest.raises(SimInputError, match="asks for 8 GPUs; the cluster has 4"):
        simulate(jobs((0, 8, 10)), parse_cluster("1x4"), create("fifo"))


def test_grouped_tasks_count_as_one_job() -> None:
    tasks = tuple(SimJob(i, 0.0, 1, 10.0 * (i + 1), group="g") for i in range(3))
    r = simulate(Workload("g", tasks), parse_cluster("1x4"), create("fifo"))
    assert r.summary.jobs == 1
    assert r.summary.mean_jct == 30.0


def test_views_built_by_the_engine_keep_every_field() -> None:
    # running_view/stopped_view spell fields out for speed; a field added to
    # JobView must be carried over too, or this fails.
    import dataclasses

    pending = JobView(
        id=7,
        submitted_at=1.0,
        gpus=2,
        name="n",
        user="u",
        group="g",
        min_gpus=1,
        max_gpus=4,
        cpus=3.0,
        memory_gb=5.0,
        gpu_type="v100",
        priority=2,
        deadline=99.0,
        estimated_duration=50.0,
        model="m",
        preemptible=True,
        queued_at=1.0,
        service_seconds=4.0,
        attained_gpu_seconds=8.0,
        preemptions=1,
        progress=0.1,
    )
    placement = Placement.single("n0", (0, 1))
    run = running_view(pending, placement, 10.0, 0.1)
    expected = dataclasses.replace(pending, placement=placement, started_at=10.0)
    assert run == expected
    back = stopped_view(run, 20.0, 0.5, preempted=True)
    assert back == dataclasses.replace(
        pending,
        queued_at=20.0,
        service_seconds=14.0,
        attained_gpu_seconds=28.0,
        preemptions=2,
        progress=0.5,
    )


def test_free_counts_handed_to_policies_match_the_nodes() -> None:
    # The engine passes ClusterView.free_counts, kept up to date incrementally;
    # a policy that checks them on every pass sees them agree with the nodes.
    from schedulearn.core.decisions import Decision
    from schedulearn.core.policy import QueueOrder
    from schedulearn.core.views import ClusterView

    inner = create("tiresias:threshold=200")
    seen = []

    class Checking:
        name: ClassVar[str] = "checking"
        tick_seconds: ClassVar[float | None] = inner.tick_seconds

        def order(self, view: ClusterView) -> QueueOrder:
            return inner.order(view)

        def decide(self, view: ClusterView) -> list[Decision]:
            assert view.free_counts == tuple(n.num_free_gpus for n in view.nodes)
            seen.append(view.free_gpus)
            return inner.decide(view)

    specs = [(t * 7.0, 1 + t % 4, 50.0 + 13 * t) for t in range(40)]
    r = simulate(jobs(*specs), parse_cluster("2x4+1x8"), Checking())
    assert r.summary.finished == 40 and len(seen) == r.passes
    assert min(seen) == 0 and max(seen) == 16


def test_with_rounds_the_policy_acts_only_on_round_boundaries() -> None:
    from schedulearn.core import create
    from schedulearn.sim import parse_cluster
    from schedulearn.sim.engine import Simulator
    from schedulearn.sim.workloads.spec import parse_workload

    (workload,) = parse_workload("poisson:n=40:rate=0.05:duration=300", seed=3)
    cluster = parse_cluster("2x4")
    free = Simulator(workload, cluster, create("srtf")).run()
    assert any(s.start % 60 for s in free.segments)  # without rounds it starts at arrivals
    rounds = Simulator(workload, cluster, create("srtf"), round_seconds=60).run()
    assert rounds.summary.finished == len(workload.jobs)
    assert all(s.start % 60 == 0 for s in rounds.segments)
    assert rounds.summary.mean_queueing_delay > free.summary.mean_queueing_delay


def test_a_job_is_stopped_at_its_time_limit_counted_over_its_segments() -> None:
    # One GPU. Job 0 (1000 s of work, limit 400 s) is preempted at 200 by
    # job 1 (50 s), resumes at 250 with 200 s of its limit left (no restart
    # cost): it is stopped at 450, its work not done, as the live server
    # stops it. Job 2 (limit 500 s, 100 s of work, arriving at 460) finishes.
    policy = create("tiresias:threshold=100:starvation_factor=0")
    work = Workload(
        "limits",
        (
            SimJob(0, 0.0, 1, 1000.0, time_limit=400.0),
            SimJob(1, 200.0, 1, 50.0),
            SimJob(2, 460.0, 1, 100.0, time_limit=500.0),
        ),
    )
    r = simulate(work, parse_cluster("1x1"), policy, LinearSpeed())
    reasons = [(s.job_id, s.start, s.end, s.end_reason) for s in r.segments]
    assert reasons == [
        (0, 0.0, 200.0, "preempted"),
        (1, 200.0, 250.0, "completed"),
        (0, 250.0, 450.0, "timeout"),
        (2, 460.0, 560.0, "completed"),
    ]
    assert ends(r) == {0: 450.0, 1: 250.0, 2: 560.0}
