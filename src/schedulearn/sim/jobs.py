"""What the simulator replays: jobs as a workload describes them, before any scheduling.

A `SimJob` is the static description of one job (or one task of a
grouped job): when it arrives, what it asks for, and how much work it
carries. Its work is its `duration`, the seconds it runs at its
requested size on the best placement; a job that names a measured
application (`app`, with `batch_size`) may leave `duration` unset and
let the measured speed model derive its work. A `Workload` is an
ordered, named collection of jobs.

This module also owns `SimInputError`, the error for input a user can
fix (a bad spec, a missing file); its message says what to change.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, fields
from operator import attrgetter

from schedulearn.core.views import SUBMITTED, JobView


class SimInputError(ValueError):
    """Input the user can fix: a bad spec, a missing file, an impossible job.

    The message is one line that says what to change.
    """


@dataclass(frozen=True, slots=True)
class SimJob(JobView):
    """One job of a workload, as submitted.

    A `JobView` (so it has every declared job field, and a field added
    there reaches the simulator with no edit here) plus what only the
    simulator needs: `duration`, and the measured application. Only the
    submitted fields matter; the run-state fields stay at their defaults.

    `group` ties the tasks of one logical job together (the Tetris
    workload: 30 tasks per job); metrics then count the group as one
    job whose completion is its last task's.
    """

    duration: float | None = None
    _: KW_ONLY
    app: str | None = None
    batch_size: int | None = None
    # Its spec declares its total steps or epochs (a live job reports it as its
    # `target`): a policy may then know its remaining work, else not.
    declares_total: bool = False
    # Simulated jobs may be preempted unless a workload says otherwise.
    preemptible: bool = field(default=True, metadata=SUBMITTED)

    def view(self, estimated_duration: float | None) -> JobView:
        """The pending view a policy sees when the job arrives (every
        `JobView` field copied by name)."""
        values = dict(zip(_VIEW_FIELDS, _view_values(self), strict=True))
        values.update(
            estimated_duration=estimated_duration,
            model=self.model or self.app,
            queued_at=self.submitted_at,
        )
        return JobView(**values)


_VIEW_FIELDS = tuple(f.name for f in fields(JobView) if f.init)
_view_values = attrgetter(*_VIEW_FIELDS)


@dataclass(frozen=True, slots=True)
class Workload:
    """Jobs in submission order, with a name for tables and a note on its origin."""

    name: str
    jobs: tuple[SimJob, ...]
    description: str = ""
    # Where the jobs came from (a generator spec or a file), for reports.
    source: str = ""
    # Parameters the workload was generated with, for reports and JSON.
    params: dict[str, str] = field(default_factory=dict)
    # The cluster shape the workload was designed for (used when none is given).
    default_cluster: str | None = None

    def __post_init__(self) -> None:
        ids = [j.id for j in self.jobs]
        if len(set(ids)) != len(ids):
            raise SimInputError(
                f"workload {self.name!r} has duplicate job ids; give each job its own id"
            )
        ordered = tuple(sorted(self.jobs, key=lambda j: (j.submitted_at, j.id)))
        object.__setattr__(self, "jobs", ordered)

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def total_gpu_seconds(self) -> float:
        """GPU-seconds of the jobs that state a duration."""
        return sum(j.gpus * j.duration for j in self.jobs if j.duration is not None)
