"""Random, consistent cluster snapshots for the core's Hypothesis tests, and the pass check.

The property tests (every policy, capabilities, goodput, fair share)
each draw their own nodes and jobs, but share how a snapshot is made
consistent: candidate running jobs are placed through a `FreePool` and
recorded by a `GpuLedger`, so busy GPUs, free CPUs and memory agree with
the jobs that hold them (`fill`). They share the job whose size may be
an elastic range (`elastic_job`), and the check of a pass: a fresh
ledger replays the running jobs and applies the decisions, raising on
any rule a pass may break (`replay`).

Each test still says what it varies (node and job fields, sizes,
counts); the draws happen in the order the test lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

from schedulearn.core import (
    ClusterView,
    Decision,
    FreePool,
    GpuLedger,
    JobView,
    NodeView,
    Start,
)
from schedulearn.core.fairshare_queues import Tenancy
from schedulearn.core.goodput import JobGoodput

NOW = 1000.0
# When a running job started, unless the test says otherwise.
BEFORE_NOW = st.floats(0, NOW)


def elastic_job(
    draw: st.DrawFn,
    job_id: int,
    *,
    most_gpus: int,
    widest: int,
    fields: Mapping[str, st.SearchStrategy[Any]],
) -> JobView:
    """A job of 0..`most_gpus` GPUs, arrived before `NOW`; one with GPUs may be elastic
    (a range up to `widest`). `fields` are the other `JobView` fields, drawn in order."""
    gpus = draw(st.integers(0, most_gpus))
    elastic = gpus > 0 and draw(st.booleans())
    return JobView(
        id=job_id,
        submitted_at=draw(st.floats(0, NOW)),
        gpus=gpus,
        min_gpus=draw(st.integers(1, gpus)) if elastic else None,
        max_gpus=draw(st.integers(gpus, widest)) if elastic else None,
        **{name: draw(strategy) for name, strategy in fields.items()},
    )


@dataclass(frozen=True)
class Snapshot:
    """Nodes as the ledger records them (GPUs held by the running jobs), and the jobs."""

    nodes: tuple[NodeView, ...]
    running: tuple[JobView, ...]
    pending: tuple[JobView, ...]

    def view(
        self, goodput: Mapping[int, JobGoodput] | None = None, tenancy: Tenancy | None = None
    ) -> ClusterView:
        """The snapshot at `NOW`, with what the host knows of goodput and queues."""
        return ClusterView(
            NOW, self.nodes, self.pending, self.running, goodput=goodput, tenancy=tenancy
        )


def fill(
    draw: st.DrawFn,
    nodes: tuple[NodeView, ...],
    a_job: Callable[[int], JobView],
    *,
    running: int,
    pending: tuple[int, int],
    size: Callable[[JobView], st.SearchStrategy[int]] | None = None,
    started_at: st.SearchStrategy[float] = BEFORE_NOW,
) -> Snapshot:
    """Up to `running` jobs (ids from 100) placed where they fit, and `pending` (a
    count range) jobs waiting, in arrival order.

    A running candidate takes its least size unless `size` draws one; a
    candidate that does not fit is dropped, as it would be waiting.
    """
    ledger = GpuLedger(nodes)
    pool = FreePool(nodes)
    placed: list[JobView] = []
    for k in range(draw(st.integers(0, running))):
        j = a_job(100 + k)
        placement = pool.pack(j, j.least_gpus if size is None else draw(size(j)))
        if placement is None:
            continue
        pool.take(j, placement)
        started = replace(j, placement=placement, started_at=draw(started_at))
        ledger.apply([Start(j.id, placement)], {j.id: started})
        placed.append(started)
    waiting = sorted(
        (a_job(k) for k in range(draw(st.integers(*pending)))), key=lambda j: j.submitted_at
    )
    return Snapshot(tuple(ledger.node_view(n.name) for n in nodes), tuple(placed), tuple(waiting))


def replay(view: ClusterView, decisions: Sequence[Decision]) -> GpuLedger:
    """A fresh ledger over the view's nodes holding its running jobs, `decisions` applied.

    The ledger raises on any rule a pass may break: a GPU given twice, a
    broken gang, a size the request does not allow, a GPU type, CPUs or
    memory short, a node that cannot run the job, a non-preemptible job
    moved, an unknown job.
    """
    ledger = GpuLedger(view.nodes)  # it ignores who holds the GPUs in the views
    for j in view.running:
        assert j.placement is not None
        ledger.apply([Start(j.id, j.placement)], {j.id: j})
    ledger.apply(decisions, {j.id: j for j in [*view.pending, *view.running]})
    return ledger
