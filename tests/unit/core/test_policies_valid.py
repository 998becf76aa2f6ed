"""Every policy, on random snapshots: valid, deterministic passes.

The simulator's property tests check whole runs; this checks single
passes directly against the ledger, with running jobs, elastic ranges,
GPU types, CPU and memory, deadlines and estimates all mixed.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from snapshots import NOW, elastic_job, fill, replay

from schedulearn.core import (
    ClusterView,
    JobView,
    NodeView,
    Preempt,
    Resize,
    Start,
    available,
    create,
)

SPECS = [
    *available(),
    "fifo:backfill=true",
    "elastic-fifo:min_age=0",
    "srtf:margin=0:min_gain=0",
    "edf:preempt=true",
    "tiresias:queues=3:threshold=50,500:starvation_factor=1",
    "tiresias:mode=artifact:threshold=50",
    "timeslice:quantum=10",
]


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterView:
    types = draw(st.sampled_from([[""], ["k80", "v100"]]))
    nodes = tuple(
        NodeView.new(
            f"n{i}",
            draw(st.integers(0, 8)),
            gpu_type=draw(st.sampled_from(types)),
            cpus=draw(st.sampled_from([0.0, 16.0])),
            memory_gb=draw(st.sampled_from([0.0, 64.0])),
        )
        for i in range(draw(st.integers(1, 6)))
    )
    fields: dict[str, st.SearchStrategy[object]] = {
        "cpus": st.sampled_from([0.0, 0.0, 2.0, 12.0]),
        "memory_gb": st.sampled_from([0.0, 0.0, 8.0, 48.0]),
        "gpu_type": st.sampled_from([None, None, *[t for t in types if t]]),
        "deadline": st.one_of(st.none(), st.floats(0, 3 * NOW)),
        "estimated_duration": st.one_of(st.none(), st.floats(1, 5000)),
        "preemptible": st.booleans(),
        "service_seconds": st.sampled_from([0.0, 100.0]),
        "attained_gpu_seconds": st.sampled_from([0.0, 60.0, 10_000.0]),
        "queued_at": st.one_of(st.none(), st.floats(0, NOW)),
    }

    def a_job(job_id: int) -> JobView:
        return elastic_job(draw, job_id, most_gpus=10, widest=12, fields=fields)

    return fill(draw, nodes, a_job, running=8, pending=(0, 10)).view()


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(view=snapshots())
def test_a_pass_is_valid_and_deterministic(spec: str, view: ClusterView) -> None:
    decisions = create(spec).decide(view)
    assert create(spec).decide(view) == decisions  # same snapshot, same answer

    pending_ids = {j.id for j in view.pending}
    running_ids = {j.id for j in view.running}
    for d in decisions:
        if isinstance(d, Start):
            assert d.job_id in pending_ids
        else:
            assert isinstance(d, Preempt | Resize)
            assert d.job_id in running_ids
    # The ledger enforces every rule (no GPU twice, gangs, sizes, types, CPU,
    # memory, non-preemptible jobs untouched) and raises on any breach.
    replay(view, decisions)
