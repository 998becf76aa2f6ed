"""Time slicing: FIFO while nobody waits; quanta taken in turns when oversubscribed."""

from __future__ import annotations

import pytest
from core_scenario import Scenario, job, node, preempts, started_ids, starts

from schedulearn.core import create


def test_behaves_like_fifo_when_everything_fits() -> None:
    s = Scenario(node("a", 4))
    assert started_ids(s.decide(create("timeslice"), 0, [job(1, gpus=2), job(2, gpus=2)])) == [1, 2]


def test_a_used_up_slice_is_suspended_for_the_longest_waiting_job() -> None:
    s = Scenario(node("a", 2))
    s.run(job(90, preemptible=True), {"a": [0]}, started_at=0.0)  # slice 700 s: used up
    s.run(job(91, preemptible=True), {"a": [1]}, started_at=300.0)  # slice 400 s: not yet
    decisions = s.decide(create("timeslice"), 700, [job(1)])
    assert preempts(decisions) == {90}
    assert starts(decisions)[1].gpus_on("a") == (0,)


def test_nobody_is_suspended_before_a_quantum() -> None:
    s = Scenario(node("a", 1))
    s.run(job(90, preemptible=True), {"a": [0]}, started_at=0.0)
    assert s.decide(create("timeslice"), 599, [job(1)]) == []
    assert preempts(s.decide(create("timeslice:quantum=300"), 599, [job(2)])) == {90}


def test_suspended_jobs_queue_behind_those_that_waited_longer() -> None:
    s = Scenario(node("a", 1))
    # Job 1 arrived first but was suspended at t=900; job 2 has waited since t=500.
    back = job(1, submitted_at=0.0, queued_at=900.0, service_seconds=600.0)
    waiting = job(2, submitted_at=500.0)
    assert started_ids(s.decide(create("timeslice"), 1000, [back, waiting])) == [2]


def test_non_preemptible_jobs_run_to_the_end() -> None:
    s = Scenario(node("a", 1))
    s.run(job(90), {"a": [0]}, started_at=0.0)
    assert s.decide(create("timeslice"), 10_000, [job(1)]) == []


def test_the_front_job_blocks_the_rest_until_it_gets_a_slice() -> None:
    s = Scenario(node("a", 2))
    s.run(job(90, preemptible=True), {"a": [0]}, started_at=0.0)
    # Job 1 needs 2 GPUs: no used-up slice can make room yet, so job 2 waits too.
    assert s.decide(create("timeslice"), 100, [job(1, gpus=2), job(2)]) == []


def test_the_tick_follows_the_quantum() -> None:
    assert create("timeslice").tick_seconds == 150.0
    assert create("timeslice:quantum=60").tick_seconds == 15.0
    with pytest.raises(ValueError, match="quantum"):
        create("timeslice:quantum=0")
