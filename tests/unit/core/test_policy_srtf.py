"""SRTF: shortest remaining estimate first, preemption only for a clear gain."""

from __future__ import annotations

import pytest
from core_scenario import Scenario, job, node, preempts, started_ids, starts

from schedulearn.core import create


def test_shortest_remaining_estimate_starts_first() -> None:
    s = Scenario(node("a", 1))
    pending = [
        job(1, estimated_duration=300.0),
        job(2, estimated_duration=100.0),
        job(3, estimated_duration=200.0),
    ]
    assert started_ids(s.decide(create("srtf"), 0, pending)) == [2]


def test_jobs_without_an_estimate_rank_last_in_arrival_order() -> None:
    s = Scenario(node("a", 2))
    pending = [job(1), job(2), job(3, estimated_duration=5000.0)]
    assert started_ids(s.decide(create("srtf"), 0, pending)) == [3, 1]


def test_a_job_that_does_not_fit_is_skipped_and_a_longer_one_starts() -> None:
    s = Scenario(node("a", 2))
    pending = [job(1, gpus=4, estimated_duration=10.0), job(2, estimated_duration=900.0)]
    assert started_ids(s.decide(create("srtf"), 0, pending)) == [2]


def test_a_clearly_shorter_job_preempts_the_longest_running_one() -> None:
    s = Scenario(node("a", 2))
    s.run(job(90, estimated_duration=1000.0, preemptible=True), {"a": [0]}, started_at=0.0)
    s.run(job(91, estimated_duration=5000.0, preemptible=True), {"a": [1]}, started_at=0.0)
    decisions = s.decide(create("srtf"), 100, [job(1, estimated_duration=100.0)])
    assert preempts(decisions) == {91}
    assert starts(decisions)[1].gpus_on("a") == (1,)


def test_remaining_time_counts_the_service_already_received() -> None:
    s = Scenario(node("a", 1))
    # Estimated 1,000 s, has run 950 s: 50 s left, shorter than the newcomer.
    s.run(job(90, estimated_duration=1000.0, preemptible=True), {"a": [0]}, started_at=0.0)
    assert s.decide(create("srtf"), 950, [job(1, estimated_duration=100.0)]) == []


def test_no_preemption_without_a_clear_gain() -> None:
    s = Scenario(node("a", 1))
    s.run(job(90, estimated_duration=150.0, preemptible=True), {"a": [0]})
    # 150 s left against 100 s: more than 20 % longer but less than 60 s more.
    assert s.decide(create("srtf"), 0, [job(1, estimated_duration=100.0)]) == []
    assert preempts(s.decide(create("srtf:min_gain=0"), 0, [job(2, estimated_duration=100.0)])) == {
        90
    }


def test_margin_is_relative() -> None:
    s = Scenario(node("a", 1))
    s.run(job(90, estimated_duration=1100.0, preemptible=True), {"a": [0]})
    assert s.decide(create("srtf"), 0, [job(1, estimated_duration=1000.0)]) == []


def test_non_preemptible_jobs_and_unestimated_newcomers_never_preempt_or_get_preempted() -> None:
    s = Scenario(node("a", 1), node("b", 1))
    s.run(job(90, estimated_duration=10_000.0), {"a": [0]})  # not preemptible
    s.run(job(91, preemptible=True), {"b": [0]})  # no estimate: counts as endless
    assert s.decide(create("srtf"), 0, [job(1)]) == []  # no estimate: cannot preempt
    decisions = s.decide(create("srtf"), 0, [job(2, estimated_duration=10.0)])
    assert preempts(decisions) == {91}


def test_preemption_can_be_switched_off() -> None:
    s = Scenario(node("a", 1))
    s.run(job(90, estimated_duration=10_000.0, preemptible=True), {"a": [0]})
    assert s.decide(create("srtf:preempt=false"), 0, [job(1, estimated_duration=1.0)]) == []


def test_only_as_many_victims_as_needed() -> None:
    s = Scenario(node("a", 4))
    for i in range(4):
        s.run(job(90 + i, estimated_duration=1000.0 * (i + 1), preemptible=True), {"a": [i]})
    decisions = s.decide(create("srtf"), 0, [job(1, gpus=2, estimated_duration=10.0)])
    assert preempts(decisions) == {92, 93}  # the two with the most time left


def test_bad_options_say_what_to_change() -> None:
    with pytest.raises(ValueError, match="margin"):
        create("srtf:margin=-1")
