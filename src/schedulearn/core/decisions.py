"""What a policy may ask for: start, preempt or resize a job.

A pass's decisions are applied as one unit (see `ledger.GpuLedger.apply`):
first every GPU given up by `Preempt` and `Resize` is released, then
every `Resize` and `Start` takes its GPUs. So a policy may hand a
preempted job's GPUs to another job in the same pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedulearn.core.views import Placement


@dataclass(frozen=True, slots=True)
class Start:
    """Run a pending job on exactly these GPUs (all of them, or none)."""

    job_id: int
    placement: Placement


@dataclass(frozen=True, slots=True)
class Preempt:
    """Suspend a running job; it returns to the queue and resumes later.

    `reclaimed_by` names the queue taking back its guaranteed GPUs when the
    fair-share layer (`core.fairshare`) preempts a job that borrowed them.
    Only such a preemption may stop a non-preemptible job: it is requeued
    and restarts from the beginning (Kueue's rule for borrowed quota).
    """

    job_id: int
    reclaimed_by: str | None = None


@dataclass(frozen=True, slots=True)
class Resize:
    """Move a running job to a new placement: grow, shrink, or migrate.

    A resize to the same number of GPUs on other GPUs is a migration.
    """

    job_id: int
    placement: Placement


Decision = Start | Preempt | Resize
