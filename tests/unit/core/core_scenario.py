"""Small hand-built cluster snapshots for the core's unit tests.

A `Scenario` keeps a real `GpuLedger`: running jobs are placed through
it, so every snapshot is consistent (busy GPUs, free CPUs and memory),
and every decision a policy returns is applied through it, so a test
that checks a policy's rule also checks that the policy never breaks
the ledger's rules (no GPU given twice, gangs, sizes, types).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from schedulearn.core import (
    ClusterView,
    Decision,
    GpuLedger,
    JobView,
    NodeView,
    Placement,
    Policy,
    Preempt,
    Resize,
    Start,
)


def node(
    name: str,
    gpus: int,
    gpu_type: str = "",
    cpus: float = 0.0,
    memory_gb: float = 0.0,
) -> NodeView:
    return NodeView.new(name, gpus, gpu_type=gpu_type, cpus=cpus, memory_gb=memory_gb)


def job(job_id: int, gpus: int = 1, submitted_at: float | None = None, **fields: Any) -> JobView:
    """A pending job; it arrives at `submitted_at` (default: its id, in seconds)."""
    at = float(job_id) if submitted_at is None else submitted_at
    return JobView(id=job_id, submitted_at=at, gpus=gpus, **fields)


def place(parts: Mapping[str, Iterable[int]] | Placement) -> Placement:
    return parts if isinstance(parts, Placement) else Placement.of(parts)


class Scenario:
    """A cluster, the jobs running on it, and a ledger that checks every pass."""

    def __init__(self, *nodes: NodeView) -> None:
        self.base = nodes
        self.ledger = GpuLedger(nodes)
        self.running: list[JobView] = []

    def run(
        self,
        j: JobView,
        parts: Mapping[str, Iterable[int]] | Placement,
        started_at: float = 0.0,
        **fields: Any,
    ) -> JobView:
        """Put `j` on `parts` as if it had started at `started_at`."""
        placement = place(parts)
        running = replace(j, placement=placement, started_at=started_at, **fields)
        self.ledger.apply([Start(j.id, placement)], {j.id: running})
        self.running.append(running)
        return running

    def view(self, now: float, pending: Sequence[JobView] = ()) -> ClusterView:
        nodes = tuple(self.ledger.node_view(n.name) for n in self.base)
        return ClusterView(now, nodes, tuple(pending), tuple(self.running))

    def decide(self, policy: Policy, now: float, pending: Sequence[JobView] = ()) -> list[Decision]:
        """One pass of `policy`, applied to the ledger (which raises on any broken rule)."""
        decisions = policy.decide(self.view(now, pending))
        jobs = {j.id: j for j in [*pending, *self.running]}
        self.ledger.apply(decisions, jobs)
        return decisions


def starts(decisions: Sequence[Decision]) -> dict[int, Placement]:
    return {d.job_id: d.placement for d in decisions if isinstance(d, Start)}


def preempts(decisions: Sequence[Decision]) -> set[int]:
    return {d.job_id for d in decisions if isinstance(d, Preempt)}


def resizes(decisions: Sequence[Decision]) -> dict[int, Placement]:
    return {d.job_id: d.placement for d in decisions if isinstance(d, Resize)}


def started_ids(decisions: Sequence[Decision]) -> list[int]:
    """Ids of started jobs, in the order the policy decided them."""
    return [d.job_id for d in decisions if isinstance(d, Start)]
