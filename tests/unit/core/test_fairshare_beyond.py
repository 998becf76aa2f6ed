"""A job larger than its queue's own guarantee runs on borrowed GPUs only
(issue 32): it takes nothing from the guarantee that protects the queue's
smaller jobs, which reclaim it as if the large job were not there. Alone,
the team could not have run the large job at all, so its small jobs must
not wait behind it for sharing."""

from __future__ import annotations

from dataclasses import replace

from core_scenario import Scenario, job, node, preempts, starts

from schedulearn.core import create
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy, shares
from schedulearn.core.fairshare_reasons import ShareRule, share_reason

TENANCY = Tenancy((Queue.of("A", 2), Queue.of("B", 2)))


def a_large_job_beside_b() -> Scenario:
    # 8 GPUs: A (guaranteed 2) runs a 3-GPU job, on borrowed GPUs only; B
    # (guaranteed 2) runs five 1-GPU jobs, one more than its deserved 4.
    sc = Scenario(node("n", 8))
    sc.run(job(1, 3, queue="A", preemptible=True), {"n": [0, 1, 2]}, started_at=0.0)
    for i in range(5):
        sc.run(job(10 + i, 1, queue="B", preemptible=True), {"n": [3 + i]}, started_at=float(i))
    return sc


def test_the_large_jobs_gpus_are_counted_apart() -> None:
    sc = a_large_job_beside_b()
    view = replace(sc.view(100.0, [job(2, 1, queue="A", preemptible=True)]), tenancy=TENANCY)
    book = shares(view, TENANCY)
    assert (book["A"].used, book["A"].beyond, book["A"].fitting) == (3, 3, 0)
    assert (book["B"].used, book["B"].beyond, book["B"].fitting) == (5, 0, 5)


def test_a_small_job_reclaims_its_guarantee_beside_its_queues_large_job() -> None:
    sc = a_large_job_beside_b()
    small = job(2, 1, queue="A", preemptible=True)
    view = replace(sc.view(100.0, [small]), tenancy=TENANCY)
    decisions = FairShare(create("fifo"), min_run=0).decide(view)
    # B's latest started job gives its GPU back; A's large job keeps running.
    assert preempts(decisions) == {14} and set(starts(decisions)) == {2}, decisions
    why = share_reason(view, small)
    assert why is not None and why.rule is ShareRule.RECLAIM, why


# --- an inner turn keeps the guarantee by the same count (Hypothesis found it) ---

ONE_FOR_A = Tenancy((Queue.of("A", 1), Queue.of("B", 0)))


def a_guarantee_held_beside_a_large_job(gpus: int = 4) -> Scenario:
    # 4 GPUs: A (guaranteed 1) runs a 3-GPU job, on borrowed GPUs, ending
    # soon, and a long 1-GPU job, 103, which alone holds its guarantee.
    sc = Scenario(node("n", gpus))
    p = {"preemptible": True}
    sc.run(job(101, 3, 0.0, queue="A", estimated_duration=1100.0, **p), {"n": [0, 1, 2]})
    sc.run(job(103, 1, 0.0, queue="A", estimated_duration=90_000.0, **p), {"n": [3]})
    return sc


def test_another_queues_start_does_not_take_the_job_that_holds_the_guarantee() -> None:
    # srtf would preempt 103 for B's short job: A's GPUs in all (4 to 3)
    # stay above its guarantee, but those that count against it (its jobs
    # that fit it) fall to 0.
    short = job(105, 1, 0.0, queue="B", preemptible=True, estimated_duration=600.0)
    view = replace(a_guarantee_held_beside_a_large_job().view(1000.0, [short]), tenancy=ONE_FOR_A)
    decisions = FairShare(create("srtf"), min_run=0.0).decide(view)
    assert 103 not in preempts(decisions) and 105 not in starts(decisions), decisions


def test_a_queues_own_large_job_does_not_push_out_the_job_that_holds_its_guarantee() -> None:
    # The same on 5 GPUs (one free) with A's own 2-GPU job waiting, shorter
    # than 103: srtf would preempt 103 for the rest of its room. A's GPUs in
    # all would grow (4 to 5), but those that count against its guarantee
    # would fall (1 to 0).
    large = job(2, 2, 0.0, queue="A", preemptible=True, estimated_duration=600.0)
    sc = a_guarantee_held_beside_a_large_job(gpus=5)
    view = replace(sc.view(1000.0, [large]), tenancy=ONE_FOR_A)
    decisions = FairShare(create("srtf"), min_run=0.0).decide(view)
    assert 103 not in preempts(decisions), decisions
