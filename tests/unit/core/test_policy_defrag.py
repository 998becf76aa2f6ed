"""Defrag: FIFO, plus moves that free one node for a blocked head job, and
gangs consolidated onto one node when nobody waits."""

from __future__ import annotations

from core_scenario import Scenario, job, node, place, resizes, starts

from schedulearn.core import create


def test_pending_jobs_start_in_arrival_order_like_fifo() -> None:
    s = Scenario(node("a", 2), node("b", 2))
    got = starts(s.decide(create("defrag"), 0, [job(1, 2), job(2, 1)]))
    assert got == {1: place({"a": [0, 1]}), 2: place({"b": [0]})}


def test_a_preemptible_job_moves_to_free_a_node_for_the_head() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    # 2 free on each node: a 4-GPU job fits nowhere without a move.
    s.run(job(10, 2, preemptible=True), {"a": [0, 1]}, started_at=0.0)
    s.run(job(11, 2), {"b": [0, 1]}, started_at=0.0)
    decisions = s.decide(create("defrag"), 500, [job(1, 4)])
    assert resizes(decisions) == {10: place({"b": [2, 3]})}
    assert starts(decisions) == {}  # the head starts once job 10 has left


def test_nothing_moves_that_is_not_preemptible_or_too_young() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    s.run(job(10, 2), {"a": [0, 1]}, started_at=0.0)
    s.run(job(11, 2, preemptible=True), {"b": [0, 1]}, started_at=450.0)
    # No move is allowed: the head runs as a gang, as under fifo.
    young = s.decide(create("defrag"), 500, [job(1, 4)])
    assert resizes(young) == {}
    assert starts(young) == {1: place({"a": [2, 3], "b": [2, 3]})}


def test_a_job_of_age_moves_instead_of_the_head_spreading() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    s.run(job(10, 2), {"a": [0, 1]}, started_at=0.0)
    s.run(job(11, 2, preemptible=True), {"b": [0, 1]}, started_at=450.0)
    decisions = s.decide(create("defrag:min_age=10"), 500, [job(1, 4)])
    assert resizes(decisions) == {11: place({"a": [2, 3]})} and starts(decisions) == {}


def test_no_move_when_the_cluster_lacks_room_anyway() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    s.run(job(10, 3, preemptible=True), {"a": [0, 1, 2]}, started_at=0.0)
    s.run(job(11, 3, preemptible=True), {"b": [0, 1, 2]}, started_at=0.0)
    assert s.decide(create("defrag"), 500, [job(1, 4)]) == []


def test_a_spread_gang_is_consolidated_when_nobody_waits() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    s.run(job(10, 4, preemptible=True), {"a": [0, 1], "b": [2, 3]}, started_at=0.0)
    assert resizes(s.decide(create("defrag"), 500, [])) == {10: place({"a": [0, 1, 2, 3]})}
    assert s.decide(create("defrag:consolidate=false"), 500, []) == []
