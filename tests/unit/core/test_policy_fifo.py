"""FIFO: arrival order, head-of-line blocking, packing, EASY backfill."""

from __future__ import annotations

from core_scenario import Scenario, job, node, place, started_ids, starts

from schedulearn.core import create
from schedulearn.core.views import JobView


def test_starts_in_arrival_order_on_the_tightest_node() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    s.run(job(90, gpus=2), {"b": [0, 1]})
    got = starts(s.decide(create("fifo"), 10, [job(1, gpus=2), job(2, gpus=3)]))
    # Job 1 fits exactly in b's two free GPUs (best fit); job 2 then takes a.
    assert got == {1: place({"b": [2, 3]}), 2: place({"a": [0, 1, 2]})}


def test_head_of_line_job_blocks_later_jobs() -> None:
    s = Scenario(node("a", 4))
    s.run(job(90), {"a": [0]})
    decisions = s.decide(create("fifo"), 10, [job(1, gpus=4), job(2, gpus=1)])
    # Three GPUs are free and job 2 would fit, but it may not overtake job 1.
    assert decisions == []


def test_job_bigger_than_any_node_runs_as_a_gang_over_fewest_nodes() -> None:
    s = Scenario(node("a", 4), node("b", 4), node("c", 4))
    s.run(job(90), {"c": [0]})
    got = starts(s.decide(create("fifo"), 10, [job(1, gpus=6)]))
    placement = got[1]
    assert placement.num_gpus == 6
    assert placement.num_nodes == 2
    assert placement.gpus_on("a") == (0, 1, 2, 3)


def test_empty_queue_decides_nothing() -> None:
    s = Scenario(node("a", 4))
    assert s.decide(create("fifo"), 0, []) == []


def _blocked_head() -> tuple[Scenario, list[JobView]]:
    """Four GPUs; a running job holds 3 until t=100; the head wants 4."""
    s = Scenario(node("a", 4))
    s.run(job(90, gpus=3, estimated_duration=100.0), {"a": [0, 1, 2]}, started_at=0.0)
    head = job(1, gpus=4, estimated_duration=50.0)
    return s, [head]


def test_backfill_starts_a_later_job_that_ends_before_the_head_can_start() -> None:
    s, pending = _blocked_head()
    short = job(2, gpus=1, estimated_duration=40.0)  # ends at 50, before the shadow time 100
    assert started_ids(s.decide(create("fifo:backfill=true"), 10, [*pending, short])) == [2]


def test_backfill_refuses_a_job_that_would_delay_the_head() -> None:
    s, pending = _blocked_head()
    long = job(2, gpus=1, estimated_duration=500.0)  # would still hold a GPU the head needs
    assert s.decide(create("fifo:backfill=true"), 10, [*pending, long]) == []


def test_backfill_allows_a_long_job_on_gpus_the_head_will_not_need() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    s.run(job(90, gpus=4, estimated_duration=100.0), {"a": [0, 1, 2, 3]})
    s.run(job(91, gpus=2, estimated_duration=200.0), {"b": [0, 1]})
    head = job(1, gpus=4, estimated_duration=50.0)  # can start at t=100 with 2 GPUs to spare
    long = job(2, gpus=2, estimated_duration=500.0)  # runs past t=100 on those 2 spare GPUs
    got = s.decide(create("fifo:backfill=true"), 10, [head, long])
    assert started_ids(got) == [2]


def test_backfill_never_starts_a_job_without_an_estimate() -> None:
    s, pending = _blocked_head()
    unknown = job(2, gpus=1)
    assert s.decide(create("fifo:backfill=true"), 10, [*pending, unknown]) == []


def test_without_backfill_a_short_later_job_still_waits() -> None:
    s, pending = _blocked_head()
    short = job(2, gpus=1, estimated_duration=40.0)
    assert s.decide(create("fifo"), 10, [*pending, short]) == []
