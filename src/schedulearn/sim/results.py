"""Typed results of a simulation: per-job records, run segments, series, the summary.

These are the simulator's output contract: the CLI renders them as a
table, writes them as JSON (`SimResult.to_dict`) and plots them. They
hold plain numbers only, so a result outlives the engine that made it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from schedulearn.core.views import Placement

# Segment, JobRecord and JobUnit are built by the ten thousand at the end of a
# trace replay; plain (not frozen) slotted dataclasses build several times
# faster. Treat them as read-only.


@dataclass(slots=True)
class Segment:
    """One uninterrupted run of a job on one placement, from the engine's start/stop log.

    `end_reason` is `completed`, `preempted`, `resized` or `timeout` (stopped
    at its time limit, its work not done).
    """

    job_id: int
    start: float
    end: float
    placement: Placement
    end_reason: str


@dataclass(slots=True)
class JobRecord:
    """What happened to one job (one task, for grouped workloads)."""

    id: int
    name: str
    group: str | None
    gpus: int
    submitted_at: float
    first_start: float | None
    end: float | None
    # Seconds the job would run alone at its requested size, start cost included.
    isolated: float
    deadline: float | None
    preemptions: int
    migrations: int
    resizes: int
    # The tenant queue it belonged to ("" without queues).
    queue: str = ""

    @property
    def jct(self) -> float | None:
        return None if self.end is None else self.end - self.submitted_at


@dataclass(slots=True)
class JobUnit:
    """A job as users count it: one job, or all tasks of one group together."""

    key: int | str  # the job id, or the group name
    submitted_at: float
    first_start: float | None
    end: float | None
    isolated: float
    deadline: float | None

    @property
    def jct(self) -> float | None:
        return None if self.end is None else self.end - self.submitted_at

    @property
    def queueing_delay(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.submitted_at


def job_units(records: Sequence[JobRecord]) -> list[JobUnit]:
    """Fold task groups into one unit each: submitted at the first task's
    submission, started at the first start, ended when the last task ends."""
    units: list[JobUnit] = []
    groups: dict[str, list[JobRecord]] = {}
    for r in records:
        if r.group is None:
            units.append(
                JobUnit(r.id, r.submitted_at, r.first_start, r.end, r.isolated, r.deadline)
            )
        else:
            groups.setdefault(r.group, []).append(r)
    for key, tasks in groups.items():
        starts = [t.first_start for t in tasks if t.first_start is not None]
        ends = [t.end for t in tasks]
        deadlines = [t.deadline for t in tasks if t.deadline is not None]
        units.append(
            JobUnit(
                key,
                min(t.submitted_at for t in tasks),
                min(starts) if starts else None,
                None if any(e is None for e in ends) else max(e for e in ends if e is not None),
                max(t.isolated for t in tasks),
                min(deadlines) if deadlines else None,
            )
        )
    return units


@dataclass(frozen=True, slots=True)
class Series:
    """Step functions over simulated time: value `i` holds from `times[i]` to `times[i+1]`."""

    times: tuple[float, ...]
    busy_gpus: tuple[int, ...]
    queued: tuple[int, ...]

    def downsample(self, points: int) -> Series:
        """At most about `points` samples, keeping the first and last."""
        n = len(self.times)
        if n <= points or points < 2:
            return self
        step = n / (points - 1)
        idx = sorted({min(n - 1, int(i * step)) for i in range(points - 1)} | {n - 1})
        return Series(
            tuple(self.times[i] for i in idx),
            tuple(self.busy_gpus[i] for i in idx),
            tuple(self.queued[i] for i in idx),
        )


@dataclass(frozen=True, slots=True)
class Summary:
    """The figures of one run. Times are seconds; JCT counts a task group as one job."""

    jobs: int
    finished: int
    unfinished: int
    makespan: float
    mean_jct: float
    median_jct: float
    p95_jct: float
    p99_jct: float
    mean_queueing_delay: float
    gpu_utilisation: float
    deadlines: int
    deadlines_met: int
    preemptions: int
    migrations: int
    resizes: int
    mean_slowdown: float
    fairness: float


@dataclass(frozen=True, slots=True)
class SimResult:
    """One policy on one workload and cluster."""

    policy: str
    workload: str
    cluster: str
    total_gpus: int
    summary: Summary
    series: Series
    records: tuple[JobRecord, ...]
    segments: tuple[Segment, ...]
    passes: int
    events: int
    wall_seconds: float

    @property
    def jobs_per_second(self) -> float:
        """Simulated jobs per second of wall time."""
        return len(self.records) / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def jcts(self) -> list[float]:
        """Completion times of finished jobs (task groups count once), sorted."""
        return sorted(u.jct for u in job_units(self.records) if u.jct is not None)

    def to_dict(self, series_points: int = 2000, jobs: bool = False) -> dict[str, Any]:
        """A JSON-ready dict; the series are thinned to about `series_points` samples."""
        series = self.series.downsample(series_points)
        out: dict[str, Any] = {
            "policy": self.policy,
            "workload": self.workload,
            "cluster": self.cluster,
            "total_gpus": self.total_gpus,
            "summary": asdict(self.summary),
            "passes": self.passes,
            "events": self.events,
            "wall_seconds": self.wall_seconds,
            "series": {
                "time": list(series.times),
                "busy_gpus": list(series.busy_gpus),
                "queued": list(series.queued),
            },
        }
        if jobs:
            out["jobs"] = [
                {
                    "id": r.id,
                    "name": r.name,
                    "group": r.group,
                    "gpus": r.gpus,
                    "submitted_at": r.submitted_at,
                    "first_start": r.first_start,
                    "end": r.end,
                    "preemptions": r.preemptions,
                    "migrations": r.migrations,
                    "resizes": r.resizes,
                }
                for r in self.records
            ]
        return out
