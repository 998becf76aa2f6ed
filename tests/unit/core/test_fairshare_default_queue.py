"""The unnamed queue ("") is the default queue ("default"): a declared
`default` queue's guarantee, weight and usage apply to jobs that name no
queue (before, they fell into an undeclared best-effort queue and were
never served by the share rounds)."""

from __future__ import annotations

from dataclasses import replace

from core_scenario import Scenario, job, node, preempts, starts

from schedulearn.core import create
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import DEFAULT_QUEUE, Queue, Tenancy, UsageMeter
from schedulearn.core.fairshare_reasons import share_reason

TENANCY = Tenancy((Queue.of("A", 2), Queue.of(DEFAULT_QUEUE, 2)))


def a_fills_four() -> Scenario:
    sc = Scenario(node("n", 4))
    for i in range(4):
        sc.run(job(i, 1, queue="A", preemptible=True), {"n": [i]}, started_at=0.0)
    return sc


def test_a_job_with_no_queue_gets_the_default_queues_guarantee() -> None:
    sc = a_fills_four()
    unnamed = [job(10, 1, queue="", preemptible=True), job(11, 1, queue="", preemptible=True)]
    view = replace(sc.view(1000.0, unnamed), tenancy=TENANCY)
    decisions = FairShare(create("fifo"), min_run=60).decide(view)
    assert set(starts(decisions)) == {10, 11}
    assert len(preempts(decisions)) == 2


def test_unnamed_jobs_are_served_in_the_share_round() -> None:
    # A 4-GPU node with 2 free; "" has waiting work, A also waits: the
    # default queue is below its guarantee and goes first.
    sc = Scenario(node("n", 4))
    sc.run(job(0, 2, queue="A", preemptible=True), {"n": [0, 1]}, started_at=0.0)
    pending = [job(10, 2, queue="A", preemptible=True), job(11, 2, queue="", preemptible=True)]
    view = replace(sc.view(1000.0, pending), tenancy=TENANCY)
    decisions = FairShare(create("fifo"), min_run=60).decide(view)
    assert starts(decisions) == {11: starts(decisions)[11]}


def test_the_reason_names_the_default_queue() -> None:
    sc = Scenario(node("n", 4))
    for i in range(4):
        sc.run(job(i, 1, queue="", preemptible=True), {"n": [i]}, started_at=0.0)
    pending = [job(10, 1, queue=""), job(11, 1, queue="A")]
    view = replace(sc.view(1000.0, pending), tenancy=TENANCY)
    why = share_reason(view, view.pending[0])
    assert why is not None and why.queue == DEFAULT_QUEUE
    assert "default uses 4 of its 2 guaranteed GPUs" in why.message


def test_usage_of_unnamed_jobs_counts_for_the_default_queue() -> None:
    meter = UsageMeter(None)
    meter.change(0.0, "", 2)
    assert meter.usage_at(10.0) == {DEFAULT_QUEUE: 20.0}
