"""`core.timelimits` and the time limit in the core's estimates: a job's
`--time` counts its run time over every attempt, stands for its estimate when
it has none (backfill, SRTF), and bounds one it has."""

from __future__ import annotations

from typing import Any

from core_scenario import Scenario, job, node, started_ids

from schedulearn.core import ClusterView, JobView, NodeView, Placement, create
from schedulearn.core.timelimits import expired, expired_reason, span, time_left


def _job(job_id: int, **kw: Any) -> JobView:
    return JobView(id=job_id, submitted_at=float(job_id), gpus=kw.pop("gpus", 1), **kw)


def _running(job_id: int, gpus: int, started_at: float, **kw: Any) -> JobView:
    placement = Placement.of({"n0": tuple(range(gpus))})
    return _job(job_id, gpus=gpus, placement=placement, started_at=started_at, **kw)


def test_time_left_counts_run_time_over_every_attempt() -> None:
    # 600 s run before a preemption, then 300 s of this run: 900 of 1000 used.
    job = _running(1, 1, started_at=700.0, service_seconds=600.0, time_limit=1000.0)
    assert time_left(job, 1000.0) == 100.0
    assert expired([job], 1000.0) == []
    assert time_left(job, 1100.0) == 0.0
    assert [j.id for j in expired([job], 1100.0)] == [1]
    assert time_left(_running(2, 1, started_at=0.0), 5000.0) is None
    assert expired([_running(2, 1, started_at=0.0)], 5000.0) == []
    # Preempted at its limit and requeued: used up before it starts again.
    requeued = _job(3, service_seconds=1000.0, time_limit=1000.0)
    assert [j.id for j in expired([requeued, _job(4, time_limit=10.0)], 1.0)] == [3]


def test_the_reason_names_the_limit() -> None:
    assert span(4 * 3600) == "4h" and span(5400) == "1h30m" and span(45) == "45s"
    reason = expired_reason(_job(1, time_limit=14400.0))
    assert reason.startswith("stopped at its time limit (4h, --time)")
    assert "SIGTERM" in reason and "SIGKILL" in reason


def test_the_limit_stands_for_a_missing_estimate_and_bounds_a_longer_one() -> None:
    assert _job(1).expected_duration is None
    assert _job(1, time_limit=300.0).expected_duration == 300.0
    assert _job(1, estimated_duration=100.0, time_limit=300.0).expected_duration == 100.0
    assert _job(1, estimated_duration=900.0, time_limit=300.0).expected_duration == 300.0
    running = _running(1, 1, started_at=0.0, time_limit=300.0)
    assert running.remaining_at(120.0) == 180.0


def _backfill(later: JobView) -> list[int]:
    """Which jobs FIFO with backfill starts on 4 GPUs, 3 held by a job ending at
    t=1000, when the head needs all 4: `later` fits on the free one if it ends
    in time."""
    scenario = Scenario(node("n0", 4))
    scenario.run(job(1, gpus=3, estimated_duration=1000.0), {"n0": (0, 1, 2)})
    decisions = scenario.decide(create("fifo:backfill=true"), 0.0, [job(2, gpus=4), later])
    return started_ids(decisions)


def test_backfill_takes_a_job_whose_time_limit_ends_before_the_head_starts() -> None:
    assert _backfill(job(3, time_limit=600.0)) == [3]
    # Without a limit (or an estimate) it could delay the head without bound.
    assert _backfill(job(3)) == []
    assert _backfill(job(3, time_limit=5000.0)) == []


def test_srtf_ranks_by_the_time_limit_when_there_is_no_estimate() -> None:
    view = ClusterView(
        now=0.0,
        nodes=(NodeView.new("n0", 1),),
        pending=(_job(1, time_limit=7200.0), _job(2, time_limit=60.0), _job(3)),
    )
    assert [j.id for j in create("srtf").order(view).jobs][:2] == [2, 1]
