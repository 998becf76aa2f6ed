"""Elastic FIFO: minimum first, spare GPUs one at a time, newcomers shrink the youngest."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from core_scenario import Scenario, job, node, place, resizes, starts

from schedulearn.core import create
from schedulearn.core.views import JobView


def elastic(job_id: int, least: int, most: int, **fields: Any) -> JobView:
    return job(job_id, gpus=least, min_gpus=least, max_gpus=most, preemptible=True, **fields)


def test_a_pending_elastic_job_starts_at_its_minimum() -> None:
    s = Scenario(node("a", 4))
    got = starts(s.decide(create("elastic-fifo"), 0, [elastic(1, 2, 4)]))
    assert got == {1: place({"a": [0, 1]})}


def test_spare_gpus_grow_an_old_enough_job_in_place_up_to_its_maximum() -> None:
    s = Scenario(node("a", 4))
    s.run(elastic(1, 1, 4), {"a": [1]}, started_at=0.0)
    got = resizes(s.decide(create("elastic-fifo"), 200, []))
    assert got == {1: place({"a": [0, 1, 2, 3]})}


def test_spare_gpus_go_one_at_a_time_in_arrival_order() -> None:
    s = Scenario(node("a", 4))
    s.run(job(90, gpus=1), {"a": [3]})
    s.run(elastic(2, 1, 8), {"a": [1]})
    s.run(elastic(1, 1, 8), {"a": [0]})
    got = resizes(s.decide(create("elastic-fifo"), 200, []))
    # One spare GPU: the job that arrived first gets it.
    assert got == {1: place({"a": [0, 2]})}


def test_two_jobs_share_spare_gpus_round_robin() -> None:
    s = Scenario(node("a", 6))
    s.run(elastic(1, 1, 8), {"a": [0]})
    s.run(elastic(2, 1, 8), {"a": [1]})
    got = resizes(s.decide(create("elastic-fifo"), 200, []))
    assert {j: p.num_gpus for j, p in got.items()} == {1: 3, 2: 3}


def test_a_job_younger_than_min_age_is_not_resized() -> None:
    s = Scenario(node("a", 4))
    s.run(elastic(1, 1, 4), {"a": [0]}, started_at=150.0)
    assert s.decide(create("elastic-fifo"), 200, []) == []
    assert resizes(s.decide(create("elastic-fifo:min_age=0"), 200, [])) == {
        1: place({"a": [0, 1, 2, 3]})
    }


def test_a_non_preemptible_elastic_job_is_never_resized() -> None:
    s = Scenario(node("a", 4))
    s.run(job(1, gpus=1, min_gpus=1, max_gpus=4, preemptible=False), {"a": [0]})
    assert s.decide(create("elastic-fifo"), 500, []) == []


def test_a_newcomer_shrinks_the_youngest_elastic_job() -> None:
    s = Scenario(node("a", 4))
    s.run(elastic(1, 1, 4), {"a": [0, 1]})
    s.run(elastic(2, 1, 4), {"a": [2, 3]})
    decisions = s.decide(create("elastic-fifo"), 500, [job(3)])
    assert resizes(decisions) == {2: place({"a": [2]})}
    assert starts(decisions) == {3: place({"a": [3]})}


def test_shrinking_stops_at_the_minimum_and_is_undone_when_it_cannot_help() -> None:
    s = Scenario(node("a", 4))
    s.run(elastic(1, 1, 4), {"a": [0, 1]})
    s.run(elastic(2, 2, 4), {"a": [2, 3]})
    # Job 3 needs 3 GPUs; only job 1 can give one up: not enough, so nothing moves.
    assert s.decide(create("elastic-fifo"), 500, [job(3, gpus=3)]) == []


def test_no_growth_while_a_job_waits() -> None:
    s = Scenario(node("a", 4), node("b", 2))
    s.run(elastic(1, 1, 4), {"a": [0]})
    # Job 2 needs 6 GPUs; 5 are free and job 1 is at its minimum: it waits,
    # and the free GPUs stay free for it rather than growing job 1.
    assert s.decide(create("elastic-fifo"), 500, [job(2, gpus=6)]) == []


def test_growth_moves_a_job_whole_to_one_node_rather_than_spread() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    s.run(job(90, gpus=3), {"a": [1, 2, 3]})
    s.run(elastic(1, 1, 2), {"a": [0]})
    assert resizes(s.decide(create("elastic-fifo"), 500, [])) == {1: place({"b": [0, 1]})}


def test_a_full_node_job_grows_across_nodes() -> None:
    s = Scenario(node("a", 4), node("b", 4), node("c", 4))
    s.run(job(90, gpus=2), {"c": [0, 1]})
    s.run(elastic(1, 4, 16), {"a": [0, 1, 2, 3]})
    # Every spare GPU, on the fewest nodes that hold them.
    got = resizes(s.decide(create("elastic-fifo"), 500, []))
    assert got == {1: place({"a": [0, 1, 2, 3], "b": [0, 1, 2, 3], "c": [2, 3]})}


def test_a_shrunk_job_grows_back_when_room_returns() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    s.run(elastic(1, 1, 8), {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3]})
    policy = create("elastic-fifo")
    got = s.decide(policy, 500, [job(2, gpus=3, preemptible=True)])
    assert resizes(got)[1].num_gpus == 5 and 2 in starts(got)
    s.running = [replace(j, placement=resizes(got)[1], started_at=500.0) for j in s.running]
    s.ledger.release(2)  # the newcomer ends
    assert s.decide(policy, 560, []) == []  # too soon after its resize
    assert resizes(s.decide(policy, 700, []))[1].num_gpus == 8


def test_min_age_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="min_age"):
        create("elastic-fifo:min_age=-1")
