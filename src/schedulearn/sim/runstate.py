"""Per-job run state of the engine, and the job views it hands to policies.

`RunState` is the mutable record the engine keeps for each job: work
done, the current segment (placement, curve, when it became ready), the
version that invalidates stale completion events, and counters.
`running_view` and `stopped_view` build the frozen `JobView`s a job
gets when it starts or stops; every other field is copied by name
(`core.views.rebuild`), so a field added to `JobView` is never dropped.
"""

from __future__ import annotations

from schedulearn.core.views import JobView, Placement, rebuild
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
        "served",
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
        # Seconds run in earlier segments (what a time limit counts).
        self.served = 0.0
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


def running_view(
    pending: JobView, placement: Placement, now: float, progress: float | None
) -> JobView:
    """The view of a job that starts (or restarts) on `placement` at `now`."""
    return rebuild(pending, placement=placement, started_at=now, progress=progress)


def stopped_view(running: JobView, now: float, progress: float | None, preempted: bool) -> JobView:
    """The pending view of a job suspended at `now` (service accrued up to now)."""
    return rebuild(
        running,
        queued_at=now if preempted else running.queued_at,
        placement=None,
        started_at=None,
        service_seconds=running.service_at(now),
        attained_gpu_seconds=running.attained_at(now),
        preemptions=running.preemptions + (1 if preempted else 0),
        progress=progress,
    )
