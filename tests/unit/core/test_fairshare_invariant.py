"""The guarantee invariant over several passes, as time moves past the minimum run time.

`test_fairshare.py` checks one pass. Here a random snapshot is carried
through passes at `now`, `now + min_run / 2`, `now + min_run` and
`now + 2 min_run + 1` and a second later (each pass's decisions applied, no job ending), so
jobs started by one pass become preemptible victims in a later one.
After every pass: a queue below its guarantee with a waiting job (not one
that pass suspended: it waits for the next) that
fits in the guarantee is not left so while jobs a reclaim may take
(`test_fairshare.assert_no_reclaim_left`) could make room for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from core_scenario import Scenario, node, preempts, starts
from hypothesis import HealthCheck, given, settings
from snapshots import replay
from test_fairshare import assert_no_reclaim_left, tenant_snapshots

from schedulearn.core import (
    ClusterView,
    Decision,
    JobView,
    Preempt,
    Resize,
    Start,
    create,
)
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy, shares

SPECS = ["fifo", "tiresias", "srtf", "timeslice:quantum=10", "edf", "goodput", "elastic-fifo"]


def after_pass(view: ClusterView, decisions: Sequence[Decision], now: float) -> ClusterView:
    """The snapshot at `now` with `decisions` applied (the ledger checks every rule)."""
    ledger = replay(view, decisions)
    running = {j.id: j for j in view.running}
    pending = {j.id: j for j in view.pending}
    for d in decisions:
        if isinstance(d, Start):
            running[d.job_id] = replace(
                pending.pop(d.job_id), placement=d.placement, started_at=view.now
            )
        elif isinstance(d, Preempt):
            old = running.pop(d.job_id)
            pending[d.job_id] = replace(old, placement=None, started_at=None)
        else:
            assert isinstance(d, Resize)
            running[d.job_id] = replace(running[d.job_id], placement=d.placement)
    return replace(
        view,
        now=now,
        nodes=tuple(ledger.node_view(n.name) for n in view.nodes),
        pending=tuple(sorted(pending.values(), key=lambda j: (j.submitted_at, j.id))),
        running=tuple(running.values()),
        free_counts=None,
    )


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=tenant_snapshots())
def test_no_queue_is_left_below_its_guarantee_across_passes(
    spec: str, snapshot: tuple[ClusterView, float]
) -> None:
    view, min_run = snapshot
    policy = FairShare(create(spec), min_run=min_run)
    start = view.now
    for later in (min_run / 2, min_run, 2 * min_run + 1, 2 * min_run + 2):
        done = after_pass(view, policy.decide(view), view.now)
        # Judged at the pass's own time, on the state the pass left.
        assert_no_reclaim_left(view, done, min_run)
        view = replace(done, now=start + later)


# --- the counterexamples Hypothesis found when suspended jobs were not judged ---


def _preemptible(job_id: int, gpus: int, queue: str, **fields: Any) -> JobView:
    return JobView(id=job_id, submitted_at=0.0, gpus=gpus, queue=queue, preemptible=True, **fields)


def test_srtf_inside_a_queue_does_not_strand_the_job_it_suspends() -> None:
    # B (3 guaranteed) runs 102 on 1 GPU; its short job 0 needs 2 and one GPU
    # is free. srtf alone would suspend 102 for it, leaving B at 2 of 3 with
    # 102 waiting while A (guaranteed 0) holds 8 preemptible GPUs.
    sc = Scenario(node("n0", 7), node("n1", 1), node("n2", 2))
    sc.run(_preemptible(100, 2, "A"), {"n2": [0, 1]})
    sc.run(_preemptible(101, 4, "A"), {"n0": [0, 1, 2, 3]})
    sc.run(_preemptible(102, 1, "B"), {"n1": [0]})
    sc.run(_preemptible(104, 1, "A"), {"n0": [4]})
    sc.run(_preemptible(105, 1, "A"), {"n0": [5]})
    tenancy = Tenancy((Queue.of("A", 0), Queue.of("B", 3), Queue.of("C", 0)))
    view = replace(
        sc.view(1000.0, [_preemptible(0, 2, "B", estimated_duration=1.0)]), tenancy=tenancy
    )
    decisions = FairShare(create("srtf"), min_run=0.0).decide(view)
    done = after_pass(view, decisions, view.now)
    assert_no_reclaim_left(view, done, 0.0)
    assert 102 not in preempts(decisions)
    assert 0 in starts(decisions)
    assert shares(done, tenancy)["B"].used == 3


def test_fair_share_reclaim_does_not_take_a_queue_below_its_guarantee() -> None:
    # A (guaranteed 0, below its fair share) reclaims from C (guaranteed 1,
    # over its fair share: it used the cluster lately). Taking both of C's
    # jobs would leave C at 0 with job 106 (1 GPU) waiting while A's jobs
    # could make room for it.
    sc = Scenario(node("n0", 1), node("n1", 1), node("n2", 4), node("n3", 8))
    sc.run(_preemptible(100, 1, "A"), {"n0": [0]})
    sc.run(_preemptible(101, 1, "A"), {"n1": [0]})
    sc.run(_preemptible(102, 1, "A"), {"n2": [0]})
    sc.run(_preemptible(103, 2, "A"), {"n2": [1, 2]})
    sc.run(_preemptible(104, 4, "A"), {"n3": [0, 1, 2, 3]})
    sc.run(_preemptible(105, 4, "C"), {"n3": [4, 5, 6, 7]})
    sc.run(_preemptible(106, 1, "C"), {"n2": [3]})
    tenancy = Tenancy(
        (Queue.of("A", 0), Queue.of("B", 0), Queue.of("C", 1)), {"A": 0.0, "B": 0.0, "C": 1e4}
    )
    pending = [_preemptible(0, 1, "A"), _preemptible(1, 1, "A")]
    view = replace(sc.view(1000.0, pending), tenancy=tenancy)
    decisions = FairShare(create("tiresias"), min_run=0.0).decide(view)
    done = after_pass(view, decisions, view.now)
    assert_no_reclaim_left(view, done, 0.0)
    assert shares(done, tenancy)["C"].used >= 1


def test_a_reclaim_takes_a_victim_that_strands_no_one() -> None:
    # B (5 guaranteed) holds 3; jobs 0 and 1 wait. Taking A's 3-GPU job 103
    # for job 1 would leave A (6 guaranteed) at 5 with its suspended 105
    # stranded; C's 100 (C over its guarantee of 1) makes room instead.
    sc = Scenario(node("n0", 1), node("n1", 1), node("n2", 5), node("n3", 8))
    sc.run(_preemptible(100, 3, "C"), {"n2": [0, 1, 2]})
    sc.run(_preemptible(101, 2, "A"), {"n2": [3, 4]})
    sc.run(_preemptible(102, 3, "A"), {"n3": [0, 1, 2]})
    sc.run(_preemptible(103, 3, "A"), {"n3": [3, 4, 5]})
    sc.run(_preemptible(104, 3, "B"), {"n0": [0], "n3": [6, 7]})
    sc.run(_preemptible(105, 1, "A"), {"n1": [0]})
    tenancy = Tenancy((Queue.of("A", 6), Queue.of("B", 5), Queue.of("C", 1)))
    pending = [_preemptible(0, 1, "B"), _preemptible(1, 1, "B")]
    view = replace(sc.view(1000.0, pending), tenancy=tenancy)
    decisions = FairShare(create("tiresias"), min_run=0.0).decide(view)
    done = after_pass(view, decisions, view.now)
    assert_no_reclaim_left(view, done, 0.0)
    assert set(starts(decisions)) == {0, 1}


@pytest.mark.parametrize("spec", ["fifo", "goodput"])
def test_a_reclaim_that_takes_a_queue_past_its_share_opens_its_borrowed_gpus(spec: str) -> None:
    # A (2 guaranteed) and C (1) each run two 3-GPU jobs beyond their
    # guarantees; one GPU is free. A's job 1 (2 GPUs) cannot reclaim yet: C is
    # at its deserved share. C's reclaim then starts job 0 (1 GPU, within C's
    # guarantee) on the free GPU, which takes C past its share: A's reclaim
    # must now take C's borrowed 104 in the same pass, not at the next event.
    sc = Scenario(node("n0", 1), node("n1", 6), node("n2", 8))
    sc.run(_preemptible(100, 3, "A"), {"n1": [0, 1, 2]})
    sc.run(_preemptible(101, 3, "C"), {"n1": [3, 4, 5]})
    sc.run(_preemptible(102, 1, "B"), {"n0": [0]})
    sc.run(_preemptible(103, 3, "A"), {"n2": [0, 1, 2]})
    sc.run(_preemptible(104, 3, "C"), {"n2": [3, 4, 5]})
    sc.run(_preemptible(105, 1, "B"), {"n2": [6]})
    tenancy = Tenancy((Queue.of("A", 2), Queue.of("B", 0), Queue.of("C", 1)))
    pending = [_preemptible(0, 1, "C"), _preemptible(1, 2, "A")]
    view = replace(sc.view(1000.0, pending), tenancy=tenancy)
    decisions = FairShare(create(spec), min_run=0.0).decide(view)
    done = after_pass(view, decisions, view.now)
    assert_no_reclaim_left(view, done, 0.0)
    assert {0, 1} <= set(starts(decisions))
    assert preempts(decisions) == {104}


def test_gpus_an_inner_preemption_frees_go_to_a_queue_below_its_guarantee() -> None:
    # A (2 guaranteed) runs three 3-GPU jobs beyond its guarantee, over its
    # deserved share; nothing is free. In C's entitled turn goodput stops A's
    # 104 (3 GPUs) for C's 1-GPU job 0, and then, in the borrow turn, starts
    # none of A's jobs on the two GPUs left. A's job 2 (2 GPUs) fits its
    # guarantee: the pass must start it there, not leave them idle.
    sc = Scenario(node("n0", 1), node("n1", 5), node("n2", 8))
    sc.run(_preemptible(100, 3, "A"), {"n1": [0, 1, 2]})
    sc.run(_preemptible(101, 3, "C"), {"n2": [0, 1, 2]})
    sc.run(_preemptible(102, 1, "B"), {"n0": [0]})
    sc.run(_preemptible(103, 3, "A"), {"n2": [3, 4, 5]})
    sc.run(_preemptible(104, 3, "A", estimated_duration=1.0), {"n1": [3, 4], "n2": [6]})
    sc.run(_preemptible(105, 1, "B"), {"n2": [7]})
    tenancy = Tenancy(
        (Queue.of("A", 2), Queue.of("B", 1), Queue.of("C", 0)), {"A": 0.0, "B": 1e4, "C": 0.0}
    )
    pending = [_preemptible(0, 1, "C"), _preemptible(1, 3, "A"), _preemptible(2, 2, "A")]
    view = replace(sc.view(1000.0, pending), tenancy=tenancy)
    decisions = FairShare(create("goodput"), min_run=0.0).decide(view)
    done = after_pass(view, decisions, view.now)
    assert_no_reclaim_left(view, done, 0.0)
    assert 104 in preempts(decisions)
    assert {0, 2} <= set(starts(decisions))
