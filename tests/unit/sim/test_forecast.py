"""Forecasts of a live snapshot, on scenarios worked out by hand."""

from __future__ import annotations

from typing import Any

import pytest

from schedulearn.core import available, create, queue_order
from schedulearn.core.decisions import Decision
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy
from schedulearn.core.views import ClusterView, GpuView, JobView, NodeView, Placement
from schedulearn.sim.forecast import forecast

NOW = 1_000_000.0


def node(
    name: str, gpus: int, held: dict[int, int] | None = None, healthy: bool = True
) -> NodeView:
    held = held or {}
    views = tuple(GpuView(i, "", f"{name}-{i}", 0, held.get(i)) for i in range(gpus))
    return NodeView(name, views, 48.0, 128.0, 48.0, 128.0, healthy)


def running(job_id: int, node_name: str, gpus: list[int], ran: float, **kw: Any) -> JobView:
    return JobView(
        id=job_id,
        submitted_at=NOW - ran - 10,
        gpus=len(gpus),
        placement=Placement.single(node_name, gpus),
        started_at=NOW - ran,
        **kw,
    )


def pending(job_id: int, gpus: int, waited: float = 5.0, **kw: Any) -> JobView:
    return JobView(id=job_id, submitted_at=NOW - waited, gpus=gpus, **kw)


def test_fifo_queue_behind_a_running_job() -> None:
    # 4 GPUs, all held by job 1 (ran 100 s of 300). Jobs 2 and 3 (2 GPUs
    # each) start together when it ends; each then runs its own duration.
    view = ClusterView(
        NOW,
        (node("a", 4, {0: 1, 1: 1, 2: 1, 3: 1}),),
        (pending(2, 2, waited=20), pending(3, 2, waited=10)),
        (running(1, "a", [0, 1, 2, 3], ran=100),),
    )
    f = forecast(view, {1: 300.0, 2: 50.0, 3: 100.0}, create("fifo"))
    first = f.of(1)
    assert first is not None and first.start == NOW - 100
    assert f.jobs[1].end == pytest.approx(NOW + 200)
    assert f.jobs[2].start == pytest.approx(NOW + 200) and f.jobs[2].end == pytest.approx(NOW + 250)
    assert f.jobs[3].start == pytest.approx(NOW + 200) and f.jobs[3].end == pytest.approx(NOW + 300)
    s = f.summary
    assert (s.jobs, s.predicted, s.unknown) == (3, 3, 0)
    assert s.makespan == pytest.approx(300)
    # JCTs from real submission: job 1 at NOW-110, job 2 at NOW-20, job 3 at NOW-10.
    assert s.mean_jct == pytest.approx((310 + 270 + 310) / 3)
    # Busy: 4 GPUs for 200 s, then 4 for 50 s, then 2 for 50 s, of 4 x 300.
    assert s.utilisation == pytest.approx((800 + 200 + 100) / 1200)


def test_an_unknown_duration_gives_no_end_and_nothing_behind_it() -> None:
    # Job 1 holds node a with no estimate; job 3 fits on node b and is
    # predicted normally; job 2 needs node a's size and waits on job 1.
    view = ClusterView(
        NOW,
        (node("a", 4, {0: 1, 1: 1, 2: 1, 3: 1}), node("b", 2)),
        (pending(3, 1, waited=9), pending(2, 4, waited=8)),
        (running(1, "a", [0, 1, 2, 3], ran=50),),
    )
    f = forecast(view, {2: 60.0, 3: 30.0}, create("fifo"))
    assert f.jobs[1].end is None
    assert f.jobs[2].start is None and f.jobs[2].end is None
    assert f.jobs[3].start == pytest.approx(NOW)
    assert f.jobs[3].end == pytest.approx(NOW + 30)
    assert (f.summary.predicted, f.summary.unknown) == (1, 2)


def test_work_already_done_counts_for_a_preempted_job() -> None:
    view = ClusterView(NOW, (node("a", 1),), (pending(5, 1, service_seconds=70.0),), ())
    f = forecast(view, {5: 100.0}, create("fifo"))
    assert f.jobs[5].end == pytest.approx(NOW + 30)


def test_an_overdue_job_is_taken_as_nearly_done() -> None:
    view = ClusterView(NOW, (node("a", 1, {0: 1}),), (), (running(1, "a", [0], ran=500),))
    f = forecast(view, {1: 100.0}, create("fifo"))
    end = f.jobs[1].end
    assert end is not None and NOW < end <= NOW + 1.0


def test_srtf_predicts_a_lower_mean_jct_than_fifo_for_short_jobs_behind_a_long_one() -> None:
    queue = (
        pending(1, 1, waited=3, estimated_duration=1000.0, preemptible=True),
        pending(2, 1, waited=2, estimated_duration=10.0, preemptible=True),
        pending(3, 1, waited=1, estimated_duration=10.0, preemptible=True),
    )
    view = ClusterView(NOW, (node("a", 1),), queue, ())
    durations = {1: 1000.0, 2: 10.0, 3: 10.0}
    fifo = forecast(view, durations, create("fifo")).summary
    srtf = forecast(view, durations, create("srtf")).summary
    assert fifo.makespan == pytest.approx(srtf.makespan)
    assert srtf.mean_jct is not None and fifo.mean_jct is not None
    assert srtf.mean_jct < fifo.mean_jct
    # fifo: 1000, 1010, 1020 (+ waits); srtf: 10, 20, 1020.
    assert fifo.mean_jct == pytest.approx((1003 + 1012 + 1021) / 3)
    assert srtf.mean_jct == pytest.approx((12 + 21 + 1023) / 3)


def test_the_policy_sees_the_live_queue_order() -> None:
    # Job 9 was submitted before job 4 (e.g. ids of another replica); fifo
    # must start job 9 first because it has waited longer.
    queue = (pending(9, 1, waited=100), pending(4, 1, waited=50))
    view = ClusterView(NOW, (node("a", 1),), queue, ())
    f = forecast(view, {9: 10.0, 4: 10.0}, create("fifo"))
    assert f.jobs[9].start == pytest.approx(NOW)
    assert f.jobs[4].start == pytest.approx(NOW + 10)


def test_a_job_no_healthy_node_can_hold_gets_no_prediction() -> None:
    view = ClusterView(
        NOW, (node("a", 2), node("b", 8, healthy=False)), (pending(1, 8), pending(2, 1)), ()
    )
    f = forecast(view, {1: 10.0, 2: 10.0}, create("fifo:backfill=true"))
    assert 1 not in f.jobs
    assert f.jobs[2].end == pytest.approx(NOW + 10)
    assert f.summary.unknown == 1


def test_nothing_is_predicted_past_the_horizon() -> None:
    view = ClusterView(NOW, (node("a", 1),), (pending(1, 1), pending(2, 1)), ())
    f = forecast(view, {1: 500.0, 2: 10.0}, create("fifo"), horizon=100.0)
    assert f.jobs[1].start == pytest.approx(NOW)
    assert f.jobs[1].end is None
    assert f.jobs[2].start is None


def test_a_tick_policy_with_an_endless_job_stops_at_the_horizon() -> None:
    view = ClusterView(
        NOW, (node("a", 1, {0: 1}),), (pending(2, 1),), (running(1, "a", [0], ran=5),)
    )
    f = forecast(view, {2: 10.0}, create("tiresias"), horizon=3600.0)
    assert f.jobs[1].end is None
    assert f.wall_seconds < 5


def test_a_wall_time_budget_cuts_the_run_short_and_leaves_later_times_unknown() -> None:
    queue = tuple(
        pending(i, 1, waited=100 - i * 0.01, estimated_duration=10.0) for i in range(1, 400)
    )
    view = ClusterView(NOW, (node("a", 1),), queue, ())
    durations = {j.id: 10.0 for j in queue}
    whole = forecast(view, durations, create("srtf"))
    assert not whole.cut_short and whole.summary.unknown == 0
    cut = forecast(view, durations, create("srtf"), budget_seconds=0.0)
    assert cut.cut_short
    # Only what the run reached is predicted; the rest is unknown, not made up.
    assert cut.summary.unknown > 0
    for jid, f in cut.jobs.items():
        if f.start is not None:
            assert f.start == whole.jobs[jid].start


@pytest.mark.parametrize("spec", [*available(), "edf:preempt=true", "fifo:backfill=true"])
def test_predicted_starts_follow_the_order_the_queue_page_shows(spec: str) -> None:
    # One GPU: jobs start one after another, so the predicted starts list the
    # queue in the order the policy walks it, which is what the Queue page
    # and `show` print (`queue_order`). Durations are short of every quantum
    # and tick, so no job is suspended meanwhile.
    queue = (
        pending(1, 1, waited=400, estimated_duration=40.0),
        pending(2, 1, waited=300, estimated_duration=10.0, deadline=NOW + 500),
        pending(3, 1, waited=200, deadline=NOW + 100),
        pending(4, 1, waited=100, estimated_duration=20.0),
    )
    view = ClusterView(NOW, (node("a", 1),), queue, ())
    policy = create(spec)
    order = queue_order(policy, view)
    f = forecast(view, {1: 40.0, 2: 10.0, 3: 30.0, 4: 20.0}, policy)
    by_start = sorted(f.jobs, key=lambda j: f.jobs[j].start or float("inf"))
    assert all(f.jobs[j].start is not None for j in by_start)
    if order.exact:
        assert by_start == [j.id for j in order.jobs]
    else:
        assert sorted(by_start) == [1, 2, 3, 4]


def test_a_running_job_is_owed_to_its_queue_in_the_forecast() -> None:
    # Job 1 of queue a (guaranteed 2) runs on 2 GPUs when the forecast starts:
    # it never arrives in the simulation, yet its queue is owed its GPUs from
    # then on, and no longer once it ends (300 s later), as live.
    seen: list[tuple[float, float]] = []

    class Spy(FairShare):
        def decide(self, view: ClusterView) -> list[Decision]:
            t = view.tenancy
            assert t is not None and t.owed is not None
            seen.append((view.now, t.owed.get("a", 0.0)))
            return super().decide(view)

    tenancy = Tenancy((Queue.of("a", 2), Queue.of("b", 2)), half_life=None)
    view = ClusterView(
        NOW,
        (node("n", 4, {0: 1, 1: 1}),),
        (pending(2, 1, queue="b"),),
        (running(1, "n", [0, 1], ran=100, queue="a"),),
        tenancy=tenancy,
    )
    forecast(view, {1: 400.0, 2: 600.0}, Spy(create("fifo")))
    owed = dict(seen)
    # At the end of job 1 (NOW + 300): 2 GPUs owed for 300 s; nothing after.
    assert owed[NOW + 300] == pytest.approx(600.0)
    assert max(owed.values()) == pytest.approx(600.0)
