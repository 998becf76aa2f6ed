"""The job-state machine: the one module that writes `Job.state`.

    pending -> assigned -> running -> succeeded | failed | cancelled
    running | assigned -> preempting -> pending   (suspended; resumes later)
    assigned | running | preempting -> lost -> pending | failed   (node died)

Every change is a conditional UPDATE (`... WHERE id = ? AND state = ?`),
so two writers that race on the same job cannot both win: the loser gets
`StaleState` and re-reads. Each change also appends a `JobTransition`
row, the job's history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import Session

from schedulearn.protocol import JobState
from schedulearn.server.models import Job, JobTransition

P, A, R, X = JobState.PENDING, JobState.ASSIGNED, JobState.RUNNING, JobState.PREEMPTING
S, F, C, L = JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    P: frozenset({A, C, F}),
    # A fast job may report its exit before its start reaches us.
    A: frozenset({R, S, F, C, L, X}),
    R: frozenset({S, F, C, L, X}),
    # A job being preempted may still finish (or fail) on its own first.
    X: frozenset({P, S, F, C, L}),
    L: frozenset({P, F, C}),
    S: frozenset(),
    F: frozenset(),
    C: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A code path asked for a change the state machine does not allow (a bug)."""


class StaleState(RuntimeError):
    """The job changed state under us (another writer won); re-read and retry."""


def can_move(current: JobState, to: JobState) -> bool:
    return to in TRANSITIONS[current]


@dataclass(slots=True)
class JobRef:
    """Just what a transition needs, for hot paths that do not load the whole row."""

    id: int
    state: JobState
    attempt: int


_HISTORY = JobTransition.__table__  # type: ignore[attr-defined]


def transition(
    session: Session,
    job: Job | JobRef,
    to: JobState,
    at: float,
    message: str | None = None,
    **fields: Any,
) -> None:
    """Move `job` to `to`, setting `fields` on the same row in the same statement.

    Timestamps follow the state: `started_at` on running, `ended_at` on a
    final state, `queued_at` on a return to pending.
    """
    # A row reads its state back as the enum (`models.EnumText`); a JobRef
    # may have been filled from a raw column.
    current = JobState(job.state)
    if not can_move(current, to):
        raise IllegalTransition(f"job {job.id}: {current} -> {to} is not allowed")
    values: dict[str, Any] = dict(fields)
    values["state"] = to
    if to is JobState.RUNNING and "started_at" not in values:
        values["started_at"] = at
    if to.is_final:
        values.setdefault("ended_at", at)
    if to is JobState.PENDING:
        values.setdefault("queued_at", at)
    if message is not None:
        values["message"] = message
    result = session.execute(
        update(Job)
        .where(Job.id == job.id, Job.state == current)  # type: ignore[arg-type]
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise StaleState(f"job {job.id} is no longer {current}")
    for key, value in values.items():
        if isinstance(job, JobRef):
            if hasattr(job, key):
                setattr(job, key, value)
        else:
            set_committed_value(job, key, value)
    session.execute(
        _HISTORY.insert().values(
            job_id=job.id or 0,
            at=at,
            from_state=current,
            to_state=to,
            attempt=job.attempt,
            message=message or "",
        )
    )
