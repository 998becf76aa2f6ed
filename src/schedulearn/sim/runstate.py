"""Per-job run state of the engine, and the job views it hands to policies.

`RunState` is the mutable record the engine keeps for each job: work
done, the current segment (placement, curve, when it became ready), the
version that invalidates stale completion events, and counters.
`running_view` and `stopped_view` build the frozen `JobView`s a job
gets when it starts or stops; they are spelled out field by field
because they run once per start or stop of every job in a trace.
"""

from __future__ import annotations

from schedulearn.core.views import JobView, Placement
from schedulearn.sim.jobs import SimJob
from schedulearn.sim.speed import Curve


class RunState:
    """Mutable run state of one job."""

    __slots__ = (
        "curve",
        "done",
        "end",
        "estimate",
        "first_start",
        "isolated",
        "job",
        "migrations",
        "placement",
        "preemptions",
        "ready",
        "resizes",
        "started",
        "version",
        "work",
    )

    def __init__(self, job: SimJob, work: float, estimate: float, isolated: float) -> None:
        self.job = job
        self.work = work
        self.estimate = estimate
        self.isolated = isolated
        self.done = 0.0
        self.started = 0.0
        self.ready = 0.0
        self.curve: Curve | None = None
        self.placement: Placement | None = None
        self.version = 0
        self.first_start: float | None = None
        self.end: float | None = None
        self.preemptions = 0
        self.migrations = 0
        self.resizes = 0


def running_view(pending: JobView, placement: Placement, now: float, progress: float) -> JobView:
    """The view of a job that starts (or restarts) on `placement` at `now`.

    Spelled out field by field because it runs once per start and
    `dataclasses.replace` costs half again as much.
    """
    return JobView(
        id=pending.id,
        submitted_at=pending.submitted_at,
        gpus=pending.gpus,
        name=pending.name,
        user=pending.user,
        group=pending.group,
        min_gpus=pending.min_gpus,
        max_gpus=pending.max_gpus,
        cpus=pending.cpus,
        memory_gb=pending.memory_gb,
        gpu_type=pending.gpu_type,
        priority=pending.priority,
        deadline=pending.deadline,
        estimated_duration=pending.estimated_duration,
        model=pending.model,
        preemptible=pending.preemptible,
        image=pending.image,
        constraints=pending.constraints,
        queued_at=pending.queued_at,
        placement=placement,
        started_at=now,
        service_seconds=pending.service_seconds,
        attained_gpu_seconds=pending.attained_gpu_seconds,
        preemptions=pending.preemptions,
        progress=progress,
    )


def stopped_view(running: JobView, now: float, progress: float, preempted: bool) -> JobView:
    """The pending view of a job suspended at `now` (service accrued up to now)."""
    return JobView(
        id=running.id,
        submitted_at=running.submitted_at,
        gpus=running.gpus,
        name=running.name,
        user=running.user,
        group=running.group,
        min_gpus=running.min_gpus,
        max_gpus=running.max_gpus,
        cpus=running.cpus,
        memory_gb=running.memory_gb,
        gpu_type=running.gpu_type,
        priority=running.priority,
        deadline=running.deadline,
        estimated_duration=running.estimated_duration,
        model=running.model,
        preemptible=running.preemptible,
        image=running.image,
        constraints=running.constraints,
        queued_at=now if preempted else running.queued_at,
        placement=None,
        started_at=None,
        service_seconds=running.service_at(now),
        attained_gpu_seconds=running.attained_at(now),
        preemptions=running.preemptions + (1 if preempted else 0),
        progress=progress,
    )
