"""Round robin: servers take turns, the pointer survives between passes."""

from __future__ import annotations

from core_scenario import Scenario, job, node, place, starts

from schedulearn.core import create


def test_consecutive_jobs_go_to_consecutive_servers_and_wrap() -> None:
    s = Scenario(node("a", 4), node("b", 4), node("c", 4))
    rr = create("round-robin")
    got = starts(s.decide(rr, 0, [job(1), job(2), job(3), job(4)]))
    assert {j: p.nodes for j, p in got.items()} == {
        1: ("a",),
        2: ("b",),
        3: ("c",),
        4: ("a",),
    }


def test_the_last_server_is_remembered_across_passes() -> None:
    s = Scenario(node("a", 4), node("b", 4), node("c", 4))
    rr = create("round-robin")
    assert starts(s.decide(rr, 0, [job(1)]))[1].nodes == ("a",)
    assert starts(s.decide(rr, 1, [job(2)]))[2].nodes == ("b",)
    assert starts(s.decide(rr, 2, [job(3)]))[3].nodes == ("c",)
    assert starts(s.decide(rr, 3, [job(4)]))[4] == place({"a": [1]})


def test_a_fresh_instance_starts_from_the_first_server() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    s.decide(create("round-robin"), 0, [job(1)])
    assert starts(s.decide(create("round-robin"), 1, [job(2)]))[2].nodes == ("a",)


def test_a_server_without_room_loses_its_turn() -> None:
    s = Scenario(node("a", 4), node("b", 4), node("c", 4))
    s.run(job(90, gpus=3), {"b": [0, 1, 2]})
    rr = create("round-robin")
    got = starts(s.decide(rr, 0, [job(1), job(2, gpus=2)]))
    # Job 1 takes a; b has one GPU left, too few for job 2, so c gets it.
    assert got == {1: place({"a": [0]}), 2: place({"c": [0, 1]})}


def test_a_job_no_server_can_hold_runs_as_a_gang() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    got = starts(s.decide(create("round-robin"), 0, [job(1, gpus=6)]))
    assert got[1].num_gpus == 6 and got[1].num_nodes == 2


def test_the_oldest_job_blocks_later_ones() -> None:
    s = Scenario(node("a", 2), node("b", 2))
    s.run(job(90), {"a": [0]})
    assert s.decide(create("round-robin"), 0, [job(1, gpus=4), job(2)]) == []
