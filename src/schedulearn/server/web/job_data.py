"""Job detail page data: the job (with why it waits) and the timeline of its states.

Owns the shape of the page's timeline and of a job's progress.
`jobs.show_to` gives the job exactly as the API shows it to the same
caller (details hidden from all but its owner and admins) and `jobs.history`
its transitions; the timeline adds when each state began and how long
it lasted. Progress is shown when the job reports one (a `progress` field on
the job, from `schedulearn.runtime.report`); jobs that report none show
no progress bar. Its reported metrics over time (the progress history)
are drawn as charts (`metric_chart`) for those who may see its details.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session

from schedulearn.protocol import JobHistory, JobPublic, JobState
from schedulearn.server.auth import Caller
from schedulearn.server.services import jobs as job_service
from schedulearn.server.services import progress as progress_service
from schedulearn.server.services import visibility
from schedulearn.server.web import metric_chart
from schedulearn.server.web.metric_chart import MetricCharts


@dataclass(frozen=True, slots=True)
class Step:
    """One state of the job's life: when it began, how long it lasted, why."""

    state: JobState
    at: float
    until: float | None  # None: the job is still in this state
    attempt: int
    message: str


@dataclass(frozen=True, slots=True)
class Progress:
    """A reported progress: a fraction when one can be worked out, and the figures."""

    fraction: float | None
    figures: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class JobPage:
    job: JobPublic
    steps: list[Step]
    progress: Progress | None
    charts: MetricCharts | None = None

    @property
    def final(self) -> bool:
        return self.job.state.is_final

    @property
    def can_cancel(self) -> bool:
        return not self.job.state.is_final

    @property
    def hidden_note(self) -> str:
        """What the page says where a detail is hidden."""
        return visibility.hidden_note(self.job.id, self.job.user)


def progress_of(raw: Any) -> Progress | None:
    """Read a job's reported progress: a number in [0, 1], or a record of figures."""
    if raw is None:
        return None
    if hasattr(raw, "model_dump"):
        raw = raw.model_dump(exclude_none=True)
    if isinstance(raw, int | float):
        return Progress(min(1.0, max(0.0, float(raw))))
    if not isinstance(raw, dict):
        return None
    # Extra metrics a job reported (`report(lr=...)`) show beside the named ones.
    flat = {k: v for k, v in raw.items() if k not in ("metrics", "goodput")}
    if isinstance(raw.get("metrics"), dict):
        flat.update(raw["metrics"])
    goodput = raw.get("goodput")
    if isinstance(goodput, dict):
        # An adaptive job's record (`ProgressReport.goodput`): what it runs with now.
        for key in ("batch_size", "local_batch", "accum_steps", "lr_scale"):
            flat[key] = goodput.get(key)
        if goodput.get("target") and raw.get("fraction") is None:
            raw = {**raw, "fraction": float(goodput.get("progress") or 0) / goodput["target"]}
    figures = {
        str(k): f"{v:.4g}" if isinstance(v, float) else str(v)
        for k, v in flat.items()
        if k not in ("at", "fraction") and v is not None
    }
    fraction = raw.get("fraction")
    if fraction is None and raw.get("epoch") is not None and raw.get("total_epochs"):
        fraction = float(raw["epoch"]) / float(raw["total_epochs"])
    if fraction is None and raw.get("step") is not None and raw.get("total_steps"):
        fraction = float(raw["step"]) / float(raw["total_steps"])
    if not isinstance(fraction, int | float):
        return Progress(None, figures)
    return Progress(min(1.0, max(0.0, float(fraction))), figures)


def timeline(job: JobPublic, history: JobHistory) -> list[Step]:
    """The job's states with when each began and ended; submission opens the first."""
    starts: list[tuple[JobState, float, int, str]] = [
        (JobState.PENDING, job.submitted_at, 0, "submitted")
    ]
    starts += [(t.to_state, t.at, t.attempt, t.message) for t in history.transitions]
    steps = []
    for i, (state, at, attempt, message) in enumerate(starts):
        until = starts[i + 1][1] if i + 1 < len(starts) else None
        steps.append(Step(state, at, until, attempt, message))
    return steps


def job_page(
    session: Session, job_id: int, caller: Caller, default_policy: str, now: float
) -> JobPage:
    """The page's data as `caller` may see it (`visibility`: details hidden from others)."""
    job = job_service.show_to(session, job_id, caller, default_policy, now)
    steps = timeline(job, job_service.history(session, job_id, caller))
    charts = None
    if not job.details_hidden:
        # The history is its owner's and admins' (as `GET /jobs/{id}/progress`).
        reports = progress_service.history(session, job_id, caller).reports
        charts = metric_chart.charts(reports)
    return JobPage(job, steps, progress_of(getattr(job, "progress", None)), charts)
