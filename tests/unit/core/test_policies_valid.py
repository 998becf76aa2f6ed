"""Every policy, on random snapshots: valid, deterministic passes.

The simulator's property tests check whole runs; this checks single
passes directly against the ledger, with running jobs, elastic ranges,
GPU types, CPU and memory, deadlines and estimates all mixed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedulearn.core import (
    ClusterView,
    FreePool,
    GpuLedger,
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
def snapshots(draw: st.DrawFn) -> tuple[tuple[NodeView, ...], list[JobView], list[JobView], float]:
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
    now = 1000.0

    def a_job(job_id: int) -> JobView:
        gpus = draw(st.integers(0, 10))
        elastic = gpus > 0 and draw(st.booleans())
        return JobView(
            id=job_id,
            submitted_at=draw(st.floats(0, now)),
            gpus=gpus,
            min_gpus=draw(st.integers(1, gpus)) if elastic else None,
            max_gpus=draw(st.integers(gpus, 12)) if elastic else None,
            cpus=draw(st.sampled_from([0.0, 0.0, 2.0, 12.0])),
            memory_gb=draw(st.sampled_from([0.0, 0.0, 8.0, 48.0])),
            gpu_type=draw(st.sampled_from([None, None, *[t for t in types if t]])),
            deadline=draw(st.one_of(st.none(), st.floats(0, 3 * now))),
            estimated_duration=draw(st.one_of(st.none(), st.floats(1, 5000))),
            preemptible=draw(st.booleans()),
            service_seconds=draw(st.sampled_from([0.0, 100.0])),
            attained_gpu_seconds=draw(st.sampled_from([0.0, 60.0, 10_000.0])),
            queued_at=draw(st.one_of(st.none(), st.floats(0, now))),
        )

    # Place candidate running jobs through a pool, so the snapshot is consistent.
    ledger = GpuLedger(nodes)
    pool = FreePool(nodes)
    running: list[JobView] = []
    for k in range(draw(st.integers(0, 8))):
        j = a_job(100 + k)
        size = j.least_gpus
        placement = pool.pack(j, size)
        if placement is None:
            continue
        pool.take(j, placement)
        started = replace(j, placement=placement, started_at=draw(st.floats(0, now)))
        ledger.apply([Start(j.id, placement)], {j.id: started})
        running.append(started)
    pending = sorted(
        (a_job(k) for k in range(draw(st.integers(0, 10)))), key=lambda j: j.submitted_at
    )
    snapshot_nodes = tuple(ledger.node_view(n.name) for n in nodes)
    return snapshot_nodes, running, pending, now


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots())
def test_a_pass_is_valid_and_deterministic(
    spec: str, snapshot: tuple[tuple[NodeView, ...], list[JobView], list[JobView], float]
) -> None:
    nodes, running, pending, now = snapshot
    view = ClusterView(now, nodes, tuple(pending), tuple(running))
    decisions = create(spec).decide(view)
    assert create(spec).decide(view) == decisions  # same snapshot, same answer

    pending_ids = {j.id for j in pending}
    running_ids = {j.id for j in running}
    for d in decisions:
        if isinstance(d, Start):
            assert d.job_id in pending_ids
        else:
            assert isinstance(d, Preempt | Resize)
            assert d.job_id in running_ids
    # The ledger enforces every rule (no GPU twice, gangs, sizes, types, CPU,
    # memory, non-preemptible jobs untouched) and raises on any breach.
    ledger = GpuLedger(
        NodeView.new(n.name, n.num_gpus, n.gpu_type, n.cpus, n.memory_gb) for n in nodes
    )
    jobs = {j.id: j for j in [*pending, *running]}
    for j in running:
        assert j.placement is not None
        ledger.apply([Start(j.id, j.placement)], {j.id: j})
    ledger.apply(decisions, jobs)
