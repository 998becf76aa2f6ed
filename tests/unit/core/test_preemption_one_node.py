"""Making room lands the job on one node when the offered victims allow it (issue 32).

Before, victims were suspended in order until the job fitted anywhere, so
an 8-GPU job usually landed on two nodes; now a node whose free GPUs and
offered victims hold the whole job is preferred, its victims taken in the
given order, and the order still decides which victims may be taken.
"""

from __future__ import annotations

from dataclasses import replace

from core_scenario import Scenario, job, node, preempts, starts

from schedulearn.core import ClusterView, FreePool, JobView, Placement, create
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy
from schedulearn.core.preemption import make_room


def _four_halves() -> Scenario:
    """Two 8-GPU nodes, each holding two 4-GPU jobs; started 40 (b), 30 (a), 20 (b), 10 (a)."""
    sc = Scenario(node("a", 8), node("b", 8))
    sc.run(job(1, 4, queue="B", preemptible=True), {"b": [0, 1, 2, 3]}, started_at=40.0)
    sc.run(job(2, 4, queue="B", preemptible=True), {"a": [4, 5, 6, 7]}, started_at=30.0)
    sc.run(job(3, 4, queue="B", preemptible=True), {"b": [4, 5, 6, 7]}, started_at=20.0)
    sc.run(job(4, 4, queue="B", preemptible=True), {"a": [0, 1, 2, 3]}, started_at=10.0)
    return sc


def _order(sc: Scenario) -> list[JobView]:
    return sorted(sc.running, key=lambda j: -(j.started_at or 0.0))


def test_the_job_lands_on_the_first_node_its_victims_empty() -> None:
    sc = _four_halves()
    view = sc.view(1000.0)
    pool = FreePool(view)
    made = make_room(pool, job(9, 8), _order(sc), pool.total_free())
    assert made is not None
    placement, used = made
    # The first two in order (1 on b, 2 on a) would spread the job over both
    # nodes; 1 and 3 empty node b, and are taken in the given order.
    assert placement == Placement.of({"b": range(8)})
    assert [v.id for v in used] == [1, 3]
    assert pool.num_free(pool.node("a")) == 0 and pool.num_free(pool.node("b")) == 0


def test_a_job_larger_than_any_node_still_takes_the_first_victims_in_order() -> None:
    sc = _four_halves()
    pool = FreePool(sc.view(1000.0))
    made = make_room(pool, job(9, 12), _order(sc), pool.total_free())
    assert made is not None
    assert [v.id for v in made[1]] == [1, 2, 3]
    assert made[0].num_nodes == 2


def test_without_a_node_whole_choice_the_order_decides_and_failure_changes_nothing() -> None:
    sc = _four_halves()
    pool = FreePool(sc.view(1000.0))
    first_two = _order(sc)[:2]  # one on each node: no node can be emptied
    made = make_room(pool, job(9, 8), first_two, pool.total_free())
    assert made is not None and [v.id for v in made[1]] == [1, 2]
    assert made[0].num_nodes == 2
    pool = FreePool(sc.view(1000.0))
    assert make_room(pool, job(9, 8), _order(sc)[:1], pool.total_free()) is None
    assert pool.total_free() == 0
    assert pool.free_gpus(pool.node("b")) == []


def test_a_non_preemptible_job_on_the_convenient_node_is_never_taken() -> None:
    sc = _four_halves()
    jobs = [replace(j, preemptible=False) if j.id == 3 else j for j in _order(sc)]
    pool = FreePool(sc.view(1000.0))
    made = make_room(pool, job(9, 8), jobs, pool.total_free())
    # Node b cannot be emptied; node a can (2 then 4).
    assert made is not None and [v.id for v in made[1]] == [2, 4]
    assert made[0] == Placement.of({"a": range(8)})


def _reclaim(tenancy: Tenancy) -> tuple[set[int], dict[int, Placement]]:
    sc = _four_halves()
    view = replace(sc.view(1000.0, [job(10, 8, queue="A", preemptible=True)]), tenancy=tenancy)
    assert isinstance(view, ClusterView)
    decisions = FairShare(create("fifo"), min_run=60).decide(view)
    sc.ledger.apply(decisions, {j.id: j for j in [*view.pending, *sc.running]})
    return preempts(decisions), starts(decisions)


def test_a_reclaim_takes_back_one_whole_node() -> None:
    # B holds all 16 GPUs and is guaranteed none: every job of it may be taken.
    taken, started = _reclaim(Tenancy((Queue.of("A", 8), Queue.of("B", 0))))
    assert taken == {1, 3}
    assert started == {10: Placement.of({"b": range(8)})}


def test_a_reclaim_takes_no_job_its_order_protects_for_a_convenient_node() -> None:
    # B is guaranteed 8: only its two latest jobs (1 on b, 2 on a) may be taken,
    # so the job spreads rather than take B's job 3 below its guarantee.
    taken, started = _reclaim(Tenancy((Queue.of("A", 8), Queue.of("B", 8))))
    assert taken == {1, 2}
    assert started[10].num_nodes == 2


def test_a_tier_bounds_the_victims_a_node_whole_choice_may_take() -> None:
    sc = _four_halves()
    order = _order(sc)  # 1 (b), 2 (a), 3 (b), 4 (a)
    team = {1: "first", 2: "first", 3: "later", 4: "later"}
    pool = FreePool(sc.view(1000.0))
    made = make_room(pool, job(9, 8), order, pool.total_free(), tier=lambda v: team[v.id])
    # The walk reaches tier "first" at job 2; emptying node b needs job 3 of the
    # later tier: the job spreads over the first tier's two jobs instead.
    assert made is not None and [v.id for v in made[1]] == [1, 2]
    assert made[0].num_nodes == 2
    team[3] = "first"
    pool = FreePool(sc.view(1000.0))
    made = make_room(pool, job(9, 8), order, pool.total_free(), tier=lambda v: team[v.id])
    assert made is not None and [v.id for v in made[1]] == [1, 3]


def test_a_reclaim_empties_no_node_with_jobs_of_a_queue_less_over_its_share() -> None:
    # C holds 18 of 32 GPUs, B 14 (shares 12 each): C's jobs 1 (b) and 2 (a) come
    # first, then B's 3 (b) and 4 (a). Emptying node b would take B's job 3 while
    # C, further over its share, has jobs to give: the job spreads over C's two.
    sc = Scenario(node("a", 8), node("b", 8), node("c", 8), node("d", 8))
    sc.run(job(1, 4, queue="C", preemptible=True), {"b": [0, 1, 2, 3]}, started_at=40.0)
    sc.run(job(2, 4, queue="C", preemptible=True), {"a": [4, 5, 6, 7]}, started_at=30.0)
    sc.run(job(6, 8, queue="C", preemptible=True), {"c": range(8)}, started_at=995.0)
    sc.run(job(8, 2, queue="C", preemptible=True), {"d": [0, 1]}, started_at=995.0)
    sc.run(job(3, 4, queue="B", preemptible=True), {"b": [4, 5, 6, 7]}, started_at=20.0)
    sc.run(job(4, 4, queue="B", preemptible=True), {"a": [0, 1, 2, 3]}, started_at=10.0)
    sc.run(job(7, 6, queue="B", preemptible=True), {"d": range(2, 8)}, started_at=995.0)
    tenancy = Tenancy((Queue.of("A", 8), Queue.of("B", 0), Queue.of("C", 0)))
    view = replace(sc.view(1000.0, [job(10, 8, queue="A", preemptible=True)]), tenancy=tenancy)
    decisions = FairShare(create("fifo"), min_run=60).decide(view)
    sc.ledger.apply(decisions, {j.id: j for j in [*view.pending, *sc.running]})
    assert preempts(decisions) == {1, 2}
    assert starts(decisions)[10].num_nodes == 2
