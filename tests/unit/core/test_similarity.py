"""Similarity: affinity matching by GPU type, exchanges, upgrades, the starvation guard."""

from __future__ import annotations

import pytest
from core_scenario import Scenario, job, node, place, resizes, started_ids, starts

from schedulearn.core import create
from schedulearn.core.throughput import ProfileTable, ThroughputProfile

# Speeds (steps/s) on k80 and v100: "fast" gains 8x from a V100, "flat" 1.25x.
SPEEDS = {"fast": (1.0, 8.0), "flat": (4.0, 5.0)}


def table() -> ProfileTable:
    return ProfileTable(
        ThroughputProfile(model, t, rate)
        for model, rates in SPEEDS.items()
        for t, rate in zip(("k80", "v100"), rates, strict=True)
    )


def mixed() -> Scenario:
    return Scenario(node("k", 2, "k80"), node("v", 2, "v100"))


def test_the_job_that_gains_most_gets_the_fast_gpus_whatever_its_arrival() -> None:
    s = mixed()
    policy = create("similarity", profiles=table())
    s.run(job(90), {"k": [0]})
    s.run(job(91), {"v": [0]})
    # One K80 and one V100 free; the flat job came first but gains less from a V100.
    got = starts(s.decide(policy, 10, [job(1, model="flat"), job(2, model="fast")]))
    assert got == {2: place({"v": [1]}), 1: place({"k": [1]})}


def test_with_only_slow_gpus_free_the_job_that_loses_least_takes_them() -> None:
    s = mixed()
    s.run(job(90, gpus=2), {"v": [0, 1]})
    s.run(job(91), {"k": [0]})
    got = starts(
        s.decide(
            create("similarity", profiles=table()), 10, [job(1, model="fast"), job(2, model="flat")]
        )
    )
    assert got == {2: place({"k": [1]})}


def test_a_gang_stays_on_one_type() -> None:
    s = Scenario(node("k", 1, "k80"), node("v1", 1, "v100"), node("v2", 1, "v100"))
    got = starts(
        s.decide(create("similarity", profiles=table()), 0, [job(1, gpus=2, model="fast")])
    )
    assert got == {1: place({"v1": [0], "v2": [0]})}


def test_unknown_models_are_served_in_arrival_order() -> None:
    s = mixed()
    s.run(job(90, gpus=2), {"k": [0, 1]})
    s.run(job(91), {"v": [0]})
    got = started_ids(s.decide(create("similarity"), 10, [job(1, model="x"), job(2)]))
    assert got == [1]


def test_a_running_job_moves_up_to_idle_faster_gpus() -> None:
    s = mixed()
    s.run(job(90, model="fast", preemptible=True), {"k": [0]})
    s.run(job(91, model="flat", preemptible=True), {"k": [1]})
    decisions = s.decide(create("similarity", profiles=table()), 10, [])
    # Only the fast job gains min_gain (1.5x) or more; the flat one stays.
    assert resizes(decisions) == {90: place({"v": [0]})}


def test_a_non_preemptible_job_is_never_moved() -> None:
    s = mixed()
    s.run(job(90, model="fast"), {"k": [0]})
    assert s.decide(create("similarity", profiles=table()), 10, []) == []
    s2 = mixed()
    s2.run(job(90, model="fast", preemptible=True), {"k": [0]})
    assert s2.decide(create("similarity:migrate=false", profiles=table()), 10, []) == []


def test_a_newcomer_that_gains_less_trades_its_fast_gpu_with_a_running_job() -> None:
    s = mixed()
    s.run(job(90, model="fast", preemptible=True), {"k": [0]})
    s.run(job(92), {"k": [1]})
    s.run(job(93), {"v": [0]})
    # One V100 free: the waiting flat job would take it (nothing else waits),
    # but the running fast job gains far more from it, so they trade.
    decisions = s.decide(create("similarity", profiles=table()), 10, [job(1, model="flat")])
    assert starts(decisions) == {1: place({"k": [0]})}
    assert resizes(decisions) == {90: place({"v": [1]})}


def test_a_job_past_max_wait_goes_first_and_holds_the_line() -> None:
    s = mixed()
    s.run(job(90, gpus=2), {"v": [0, 1]})
    s.run(job(91), {"k": [0]})
    policy = create("similarity:max_wait=100", profiles=table())
    old = job(1, gpus=2, model="flat", submitted_at=0.0)
    young = job(2, model="flat", submitted_at=150.0)
    # Before max_wait the young job takes the free K80; after it, the old one
    # (which needs 2 GPUs of one type) blocks it until 2 GPUs free up.
    assert started_ids(mixed_copy(s).decide(policy, 90, [old, young])) == [2]
    assert s.decide(policy, 200, [old, young]) == []


def mixed_copy(s: Scenario) -> Scenario:
    copy = mixed()
    for j in s.running:
        assert j.placement is not None
        copy.run(j, j.placement, j.started_at or 0.0)
    return copy


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="min_gain"):
        create("similarity:min_gain=1")
    with pytest.raises(ValueError, match="max_wait"):
        create("similarity:max_wait=-1")
    with pytest.raises(ValueError, match="takes gavel"):
        create("similarity:profiles=nope")


# --- remaining work: seconds saved, not only the speed-up ratio ------------------


def test_of_two_jobs_that_gain_alike_the_longer_one_gets_the_fast_gpu() -> None:
    s = mixed()
    s.run(job(90), {"k": [0]})
    s.run(job(91), {"v": [0]})
    short = job(1, model="fast", estimated_duration=600.0)
    long = job(2, model="fast", estimated_duration=600_000.0)
    # Same speed-up; the long job saves a thousand times more seconds on the V100,
    # so it takes it although the short one came first.
    got = starts(s.decide(create("similarity", profiles=table()), 10, [short, long]))
    assert got == {2: place({"v": [1]}), 1: place({"k": [1]})}


def test_a_long_newcomer_is_not_traded_to_slow_gpus_for_a_short_running_job() -> None:
    def run(newcomer_estimate: float) -> dict[int, object]:
        s = mixed()
        s.run(job(90, model="fast", preemptible=True, estimated_duration=1_000.0), {"k": [0]})
        s.run(job(92), {"k": [1]})
        s.run(job(93), {"v": [0]})
        flat = job(1, model="flat", estimated_duration=newcomer_estimate)
        return dict(resizes(s.decide(create("similarity", profiles=table()), 10, [flat])))

    # A short flat newcomer trades its V100 with the running fast job (which gains 8x)...
    assert run(100.0) == {90: place({"v": [1]})}
    # ...but a week-long one keeps it: the fast job would save minutes, it would lose days.
    assert run(7 * 86400.0) == {}


def test_of_two_jobs_on_slow_gpus_the_one_with_more_work_left_moves_up() -> None:
    s = mixed()
    s.run(job(90, model="fast", preemptible=True, estimated_duration=2_000.0), {"k": [0]}, 0.0)
    s.run(job(91, model="fast", preemptible=True, estimated_duration=90_000.0), {"k": [1]}, 5.0)
    s.run(job(93), {"v": [0]})
    decisions = s.decide(create("similarity", profiles=table()), 10, [])
    assert resizes(decisions) == {91: place({"v": [1]})}


def test_a_batch_past_max_wait_starts_critical_jobs_first_then_shortest_first() -> None:
    s = Scenario(node("a", 2, "v100"))
    policy = create("similarity:max_wait=0", profiles=table())
    # Submitted together. The drain time is (10 + 20 + 1000) / 2 GPUs = 515 s; the
    # 1000 s job takes more than half of it even alone, so it goes first (it would set
    # the makespan if started last), then the others shortest first.
    batch = [
        job(1, submitted_at=0.0, model="flat", estimated_duration=20.0),
        job(2, submitted_at=0.0, model="flat", estimated_duration=10.0),
        job(3, submitted_at=0.0, model="flat", estimated_duration=1_000.0),
    ]
    assert started_ids(s.decide(policy, 5, batch)) == [3, 2]
    # A job that arrived earlier still goes first: the guard's arrival order holds.
    s2 = Scenario(node("a", 2, "v100"))
    early = job(4, submitted_at=-1.0, model="flat", estimated_duration=5.0)
    assert started_ids(s2.decide(policy, 5, [*batch, early])) == [4, 3]


def test_a_job_matched_to_a_gpu_type_still_needs_its_owners_account() -> None:
    # The V100 node runs jobs as their owners and has only bob's account:
    # alice's fast job, matched to V100s, may not go there (its K80 may).
    from dataclasses import replace

    from schedulearn.core.capabilities import NodeCapabilities, can_run

    bob_only = NodeCapabilities(accounts=frozenset({"root", "bob"}))
    v100 = replace(node("v", 2, "v100"), capabilities=bob_only)
    s = Scenario(node("k", 2, "k80"), v100)
    alice = job(1, model="fast", user="alice", account="alice")
    decisions = s.decide(create("similarity", profiles=table()), 10, [alice])
    assert starts(decisions) == {1: place({"k": [0]})}, decisions
    assert not can_run(alice, v100)
