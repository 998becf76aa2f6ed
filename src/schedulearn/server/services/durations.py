"""How long each waiting or running job is expected to run: the duration estimates.

Owns the rule that turns what the server knows into one figure per job,
in this order of preference:

1. `progress`: a running job that reports how far it is
   (`schedulearn.runtime.report(epoch=e, total_epochs=n)`, or step with a
   `total_steps=` keyword, or a `fraction=` keyword) is extrapolated:
   total = run time so far / fraction done, once it is at least 2% done;
2. `estimate`: the user's `estimated_duration`;
3. `history`: the median run time of similar jobs that succeeded —
   the same user and job name, or else the same command;
4. `estimate` again: the job's time limit (`--time`), which it cannot
   outlast, when nothing above gives a figure;
5. none: the duration is unknown and no number is made up; forecasts
   then say "unknown" for the job and anything that waits on it.

Every figure is bounded by the time limit: the job is stopped there.

Reads only: one query for the jobs that need history, grouped in memory.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy import select
from sqlmodel import Session, col

from schedulearn.protocol import JobState
from schedulearn.server.models import Job

# History: how many of the latest succeeded jobs to look through.
HISTORY_WINDOW = 5000
# Progress below this fraction extrapolates too wildly to trust.
MIN_FRACTION = 0.02


class DurationSource(StrEnum):
    PROGRESS = "progress"
    ESTIMATE = "estimate"
    HISTORY = "history"


@dataclass(frozen=True, slots=True)
class DurationEstimate:
    """Total run time in seconds at the requested size, and where it came from."""

    seconds: float
    source: DurationSource
    # How many finished jobs a history estimate rests on.
    samples: int = 0


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the estimate of one job is made from."""

    id: int
    user: str
    name: str
    command: Any
    estimated_duration: float | None
    service_seconds: float  # run time so far, as of now (0 if it never ran)
    progress: Any = None  # the job's reported progress, if the server stores one
    time_limit: float | None = None  # its `--time`, in seconds of run time


def fraction_done(progress: Any) -> float | None:
    """A reported progress as a fraction in [0, 1], or None when it gives none."""
    if progress is None:
        return None
    if hasattr(progress, "model_dump"):
        progress = progress.model_dump(exclude_none=True)
    if isinstance(progress, int | float) and not isinstance(progress, bool):
        return min(1.0, max(0.0, float(progress)))
    if not isinstance(progress, Mapping):
        return None
    extra = progress.get("metrics")
    if isinstance(extra, Mapping):
        # Keywords beyond the named ones (e.g. total_steps, fraction) arrive here.
        progress = {**extra, **{k: v for k, v in progress.items() if v is not None}}
    for done, total in (("fraction", None), ("step", "total_steps"), ("epoch", "total_epochs")):
        value = progress.get(done)
        if not isinstance(value, int | float):
            continue
        if total is None:
            return min(1.0, max(0.0, float(value)))
        whole = progress.get(total)
        if isinstance(whole, int | float) and whole > 0:
            return min(1.0, max(0.0, float(value) / float(whole)))
    return None


def from_progress(service_seconds: float, progress: Any) -> float | None:
    """Total run time extrapolated from progress, or None when it cannot be."""
    fraction = fraction_done(progress)
    if fraction is None or fraction < MIN_FRACTION or service_seconds <= 0:
        return None
    return service_seconds / fraction


def command_key(command: Any) -> str:
    """The command as one comparable string (a list and its JSON are the same key)."""
    return command if isinstance(command, str) else json.dumps(command, separators=(",", ":"))


@dataclass(slots=True)
class History:
    """Run times of succeeded jobs, by (user, name) and by command."""

    by_name: dict[tuple[str, str], list[float]]
    by_command: dict[str, list[float]]
    # Each group's median, computed once: a forecast looks up every queued job,
    # and sorting a group of thousands for each of them made its cost grow with
    # the queue times the history (issue 36: 1.8 s of 2.2 at 300 nodes).
    medians: dict[tuple[str, object], float] = field(default_factory=dict)

    def lookup(self, job: JobFacts) -> DurationEstimate | None:
        times = self.by_name.get((job.user, job.name)) if job.name else None
        key: tuple[str, object] = ("name", (job.user, job.name))
        if not times:
            command = command_key(job.command)
            times, key = self.by_command.get(command), ("command", command)
        if not times:
            return None
        median = self.medians.get(key)
        if median is None:
            median = self.medians[key] = statistics.median(times)
        return DurationEstimate(median, DurationSource.HISTORY, len(times))


def load_history(session: Session, window: int = HISTORY_WINDOW) -> History:
    """The latest `window` succeeded jobs' run times, grouped for `History.lookup`."""
    rows = session.execute(
        select(
            col(Job.user),
            col(Job.name),
            col(Job.command),
            col(Job.service_seconds),
            col(Job.started_at),
            col(Job.ended_at),
        )
        .where(col(Job.state) == JobState.SUCCEEDED.value)
        .order_by(col(Job.id).desc())
        .limit(window)
    )
    by_name: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_command: dict[str, list[float]] = defaultdict(list)
    for user, name, command, service, started, ended in rows:
        ran = service if service and service > 0 else None
        if ran is None and started is not None and ended is not None:
            ran = ended - started
        if ran is None or ran <= 0:
            continue
        if name:
            by_name[(user, name)].append(ran)
        by_command[command_key(command)].append(ran)
    return History(dict(by_name), dict(by_command))


def estimate(job: JobFacts, history: History | None) -> DurationEstimate | None:
    """One job's duration estimate by the rule in the module docstring."""
    found = _unbounded(job, history)
    limit = job.time_limit
    if limit is None or limit <= 0:
        return found
    if found is None:
        return DurationEstimate(limit, DurationSource.ESTIMATE)
    if found.seconds > limit:
        return DurationEstimate(limit, found.source, found.samples)
    return found


def _unbounded(job: JobFacts, history: History | None) -> DurationEstimate | None:
    extrapolated = from_progress(job.service_seconds, job.progress)
    if extrapolated is not None:
        return DurationEstimate(extrapolated, DurationSource.PROGRESS)
    if job.estimated_duration is not None and job.estimated_duration > 0:
        return DurationEstimate(job.estimated_duration, DurationSource.ESTIMATE)
    if history is not None:
        return history.lookup(job)
    return None


def estimate_all(session: Session, jobs: Iterable[JobFacts]) -> dict[int, DurationEstimate]:
    """Estimates for many jobs; history is read once, and only if some job needs it."""
    jobs = list(jobs)
    needs_history = any(
        (j.estimated_duration is None or j.estimated_duration <= 0)
        and from_progress(j.service_seconds, j.progress) is None
        for j in jobs
    )
    history = load_history(session) if needs_history else None
    found: dict[int, DurationEstimate] = {}
    for job in jobs:
        guess = estimate(job, history)
        if guess is not None:
            found[job.id] = guess
    return found
