"""Queue trees (issue 32 item 6): children share their parent's guarantee
first, then the cluster's; a child that comes back takes its part back from
a sibling; trees that cannot be kept are refused with what to change."""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_scenario import Scenario, job, node, preempts, starts

from schedulearn.core import ClusterView, JobView, create
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy, shares

# research (4 GPUs) holds vision and nlp (2 each); ops is a team of its own (4).
TREE = Tenancy(
    (
        Queue.of("research", 4),
        Queue.of("vision", 2, parent="research"),
        Queue.of("nlp", 2, parent="research"),
        Queue.of("ops", 4),
    )
)
# The same guarantees side by side, no tree.
FLAT = Tenancy((Queue.of("vision", 2), Queue.of("nlp", 2), Queue.of("ops", 4)))


def waiting(queue: str, gpus: int, first_id: int) -> list[JobView]:
    return [job(first_id + i, 1, queue=queue, preemptible=True) for i in range(gpus)]


def test_a_child_inherits_the_part_of_its_parents_guarantee_its_sibling_leaves() -> None:
    # 8 GPUs, all free; vision is idle, nlp and ops each want all 8.
    view = ClusterView(
        100.0,
        (node("n", 8),),
        tuple(waiting("nlp", 8, 0) + waiting("ops", 8, 100)),
        (),
        tenancy=TREE,
    )
    book = shares(view, TREE)
    assert book["nlp"].guaranteed == 4  # its 2 and vision's 2
    assert book["nlp"].share == pytest.approx(4.0)
    assert book["ops"].share == pytest.approx(4.0)
    assert book["vision"].guaranteed == 2  # an idle child keeps its own promise
    # Side by side, vision's idle 2 GPUs are lent by weight to both teams.
    flat = shares(replace(view, tenancy=FLAT), FLAT)
    assert flat["nlp"].guaranteed == 2
    assert flat["nlp"].share == pytest.approx(3.0)
    assert flat["ops"].share == pytest.approx(5.0)


def test_when_the_sibling_returns_the_inherited_part_goes_back() -> None:
    view = ClusterView(
        100.0,
        (node("n", 8),),
        tuple(waiting("vision", 2, 0) + waiting("nlp", 8, 50) + waiting("ops", 8, 100)),
        (),
        tenancy=TREE,
    )
    book = shares(view, TREE)
    assert book["vision"].guaranteed == 2 and book["nlp"].guaranteed == 2
    assert book["vision"].share == pytest.approx(2.0)
    assert book["nlp"].share == pytest.approx(2.0)
    assert book["ops"].share == pytest.approx(4.0)


def _full_cluster() -> Scenario:
    """nlp holds 4 (two 2-GPU jobs, started last), ops 2, borrower holds 2."""
    sc = Scenario(node("n", 8))
    sc.run(job(1, 2, queue="borrower", preemptible=True), {"n": [0, 1]}, started_at=0.0)
    sc.run(job(2, 2, queue="ops", preemptible=True), {"n": [2, 3]}, started_at=0.0)
    sc.run(job(3, 2, queue="nlp", preemptible=True), {"n": [4, 5]}, started_at=10.0)
    sc.run(job(4, 2, queue="nlp", preemptible=True), {"n": [6, 7]}, started_at=10.0)
    return sc


def test_other_teams_reclaim_from_a_borrower_not_from_a_child_within_its_parents_guarantee() -> (
    None
):
    # ops (guaranteed 4, holds 2) waits for 2 more. In the tree nlp holds
    # research's 4 while vision is idle: ops takes its GPUs from the team
    # beyond any guarantee. Side by side, nlp is 2 over its own 2 and, started
    # last, is the one preempted.
    mine = [job(20, 2, queue="ops", preemptible=True)]

    def reclaim(tenancy: Tenancy) -> set[int]:
        sc = _full_cluster()
        view = replace(sc.view(1000.0, mine), tenancy=tenancy)
        decisions = FairShare(create("fifo"), min_run=60).decide(view)
        sc.ledger.apply(decisions, {j.id: j for j in [*mine, *sc.running]})
        assert set(starts(decisions)) == {20}
        return preempts(decisions)

    assert reclaim(Tenancy((*TREE.queues, Queue.of("borrower", 0)))) == {1}
    side_by_side = reclaim(Tenancy((*FLAT.queues, Queue.of("borrower", 0))))
    assert side_by_side and side_by_side <= {3, 4}


def test_a_child_that_returns_takes_its_part_back_from_its_sibling() -> None:
    # research 8 = vision 4 + nlp 4; nlp holds all 8 while vision is idle.
    tenancy = Tenancy(
        (
            Queue.of("research", 8),
            Queue.of("vision", 4, parent="research"),
            Queue.of("nlp", 4, parent="research"),
        )
    )
    sc = Scenario(node("n", 8))
    for i in range(4):
        sc.run(job(i, 2, queue="nlp", preemptible=True), {"n": [2 * i, 2 * i + 1]})
    back = [job(10, 2, queue="vision", preemptible=True)]
    decisions = FairShare(create("fifo"), min_run=60).decide(
        replace(sc.view(1000.0, back), tenancy=tenancy)
    )
    assert set(starts(decisions)) == {10}
    assert len(preempts(decisions)) == 1 and preempts(decisions) <= {0, 1, 2, 3}
    sc.ledger.apply(decisions, {j.id: j for j in [*back, *sc.running]})


@pytest.mark.parametrize(
    ("queues", "says"),
    [
        ((Queue.of("a", 1, parent="nowhere"),), "its parent 'nowhere' is not a queue"),
        (
            (Queue.of("p", 2), Queue.of("a", 2, parent="p"), Queue.of("b", 1, parent="p")),
            "guaranteed 3 GPUs together, more than its 2",
        ),
        (
            (Queue.of("a", 0, parent="b"), Queue.of("b", 0, parent="a")),
            "form a loop",
        ),
        ((Queue.of("p", 4, limit=6), Queue.of("a", 1, parent="p")), "set them on the children"),
        ((Queue("p", {"v100": 2}), Queue.of("a", 1, parent="p")), "one GPU type"),
        ((Queue.of("default", 2), Queue.of("a", 1, parent="default")), "stays out of queue trees"),
    ],
)
def test_a_tree_that_cannot_be_kept_is_refused(queues: tuple[Queue, ...], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Tenancy(queues)


def test_a_queue_is_not_its_own_parent() -> None:
    with pytest.raises(ValueError, match="must be another queue"):
        Queue.of("a", 1, parent="a")
