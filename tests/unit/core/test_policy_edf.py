"""EDF: earliest deadline first; no-deadline jobs after, in arrival order; optional preemption."""

from __future__ import annotations

from core_scenario import Scenario, job, node, preempts, started_ids, starts

from schedulearn.core import create


def test_earliest_deadline_first_then_no_deadline_in_arrival_order() -> None:
    s = Scenario(node("a", 4))
    pending = [
        job(1),
        job(2, deadline=900.0),
        job(3),
        job(4, deadline=300.0),
        job(5, deadline=600.0),
    ]
    assert started_ids(s.decide(create("edf"), 0, pending)) == [4, 5, 2, 1]


def test_equal_deadlines_go_by_arrival() -> None:
    s = Scenario(node("a", 1))
    pending = [job(2, deadline=500.0), job(1, deadline=500.0, submitted_at=0.5)]
    assert started_ids(s.decide(create("edf"), 0, pending)) == [1]


def test_a_job_that_does_not_fit_does_not_block_later_deadlines() -> None:
    s = Scenario(node("a", 2))
    pending = [job(1, gpus=4, deadline=100.0), job(2, deadline=200.0)]
    assert started_ids(s.decide(create("edf"), 0, pending)) == [2]


def test_no_preemption_by_default() -> None:
    s = Scenario(node("a", 1))
    s.run(job(90, deadline=10_000.0, preemptible=True), {"a": [0]})
    assert s.decide(create("edf"), 0, [job(1, deadline=100.0)]) == []


def test_with_preemption_a_later_or_missing_deadline_yields() -> None:
    s = Scenario(node("a", 3))
    s.run(job(90, deadline=50.0, preemptible=True), {"a": [0]})
    s.run(job(91, deadline=5000.0, preemptible=True), {"a": [1]})
    s.run(job(92, preemptible=True), {"a": [2]})  # no deadline: the latest of all
    decisions = s.decide(create("edf:preempt=true"), 0, [job(1, deadline=100.0)])
    assert preempts(decisions) == {92}
    assert starts(decisions)[1].gpus_on("a") == (2,)


def test_with_preemption_an_earlier_deadline_or_non_preemptible_job_keeps_running() -> None:
    s = Scenario(node("a", 2))
    s.run(job(90, deadline=50.0, preemptible=True), {"a": [0]})
    s.run(job(91, deadline=5000.0), {"a": [1]})  # later deadline but not preemptible
    assert s.decide(create("edf:preempt=true"), 0, [job(1, deadline=100.0)]) == []


def test_a_job_without_deadline_never_preempts() -> None:
    s = Scenario(node("a", 1))
    s.run(job(90, preemptible=True), {"a": [0]})
    assert s.decide(create("edf:preempt=true"), 0, [job(1)]) == []
