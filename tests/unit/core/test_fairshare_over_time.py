"""A guarantee kept over time (issue 32): a queue that is not behind (it has
had at least 80% of its guaranteed fraction of the GPU-time used lately)
lends what it holds like a borrower (no reclaim, its jobs preemptible by the
policy in force once they ran `min_run`), and is told why it waits; a queue
behind keeps its rules."""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_scenario import Scenario, job, node, preempts, starts

from schedulearn.core import ClusterView, JobView, create
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy, shares
from schedulearn.core.fairshare_reasons import ShareRule, share_reason

# A is behind (no use lately) or ahead (all of it): 2 of 4 GPUs are 50%.
BEHIND = {"A": 0.0, "B": 10_000.0}
AHEAD = {"A": 10_000.0, "B": 1_000.0}


def tenancy(usage: dict[str, float]) -> Tenancy:
    return Tenancy((Queue.of("A", 2), Queue.of("B", 2), Queue.of("C", 0)), usage=usage)


def b_fills_four() -> Scenario:
    """B holds all 4 GPUs (2 borrowed from A) since t=0."""
    sc = Scenario(node("n", 4))
    for i in range(4):
        sc.run(job(i, 1, queue="B", preemptible=True), {"n": [i]})
    return sc


def view(sc: Scenario, pending: list[JobView], usage: dict[str, float]) -> ClusterView:
    return replace(sc.view(1000.0, pending), tenancy=tenancy(usage))


def test_a_queue_behind_takes_its_guarantee_back_one_ahead_does_not() -> None:
    a = [job(10, 1, queue="A", preemptible=True), job(11, 1, queue="A", preemptible=True)]
    behind = view(b_fills_four(), a, BEHIND)
    assert not shares(behind, tenancy(BEHIND))["A"].ahead
    decisions = FairShare(create("fifo"), min_run=60).decide(behind)
    assert set(starts(decisions)) == {10, 11} and len(preempts(decisions)) == 2

    ahead = view(b_fills_four(), a, AHEAD)
    assert shares(ahead, tenancy(AHEAD))["A"].ahead
    assert FairShare(create("fifo"), min_run=60).decide(ahead) == []
    why = share_reason(ahead, a[0])
    assert why is not None and why.rule is ShareRule.AHEAD
    assert why.message == (
        "A uses 0 of its 2 guaranteed GPUs but had 91% of the GPU-time used lately "
        "against its 50%: it takes nothing back until the other queues catch up, "
        "and waits for idle GPUs"
    )


@pytest.mark.parametrize("spec", ["tiresias:threshold=3600", "srtf"])
def test_the_policy_in_force_preempts_a_queue_ahead_within_its_guarantee(spec: str) -> None:
    # A and B each hold their 2 guaranteed GPUs with long jobs that ran 1,000 s;
    # C (guaranteed nothing) sends a short job. Tiresias (least attained
    # service) and srtf (shortest remaining) would run it first: they may
    # take one of A's GPUs only while A is ahead on its fraction.
    def cluster() -> Scenario:
        sc = Scenario(node("n", 4))
        for i in range(4):
            long = job(i, 1, queue="AB"[i // 2], preemptible=True, estimated_duration=90_000.0)
            sc.run(long, {"n": [i]}, attained_gpu_seconds=5_000.0)
        return sc

    short = [job(20, 1, queue="C", preemptible=True, estimated_duration=60.0)]
    usage_ahead = {"A": 50_000.0, "B": 10_000.0, "C": 0.0}
    ahead = FairShare(create(spec), min_run=60).decide(view(cluster(), short, usage_ahead))
    assert set(starts(ahead)) == {20} and preempts(ahead) <= {0, 1}, ahead
    # A had 2,000 of 12,000 GPU-seconds (17%) against its 50%: behind.
    usage_behind = {"A": 2_000.0, "B": 10_000.0, "C": 0.0}
    behind = FairShare(create(spec), min_run=60).decide(view(cluster(), short, usage_behind))
    assert set(starts(behind)) <= {20} and not preempts(behind) & {0, 1}, behind
