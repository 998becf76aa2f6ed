"""The job-state machine: the one module that writes `Job.state`.

    pending -> assigned -> running -> succeeded | failed | cancelled
    running | assigned -> preempting -> pending   (suspended; resumes later)
    running | pending -> timeout   (stopped at its time limit, or used it up before)
    assigned | running | preempting -> lost -> pending | failed   (node died)
    pending -> succeeded | failed   (an exit reported late, before a new attempt)

Every change is a conditional UPDATE (`... WHERE id = ? AND state = ?`),
so two writers that race on the same job cannot both win: the loser gets
`StaleState` and re-reads. Each change also appends a `JobTransition`
row, the job's history.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Update, bindparam, update
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import Session, col

from schedulearn.protocol import JobState
from schedulearn.server.bulk import execute_many
from schedulearn.server.models import Job, JobTransition

P, A, R, X = JobState.PENDING, JobState.ASSIGNED, JobState.RUNNING, JobState.PREEMPTING
S, F, C, L = JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST
T = JobState.TIMEOUT

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # A requeued job whose lost copy turns out to have ended on its own,
    # reported once its agent is back (`lifecycle.late_exit`).
    # A requeued job whose earlier runs used up its time limit: `timeout`.
    P: frozenset({A, C, S, F, T}),
    # A fast job may report its exit before its start reaches us.
    A: frozenset({R, S, F, C, L, X}),
    R: frozenset({S, F, C, L, X, T}),
    # A job being preempted may still finish (or fail) on its own first.
    X: frozenset({P, S, F, C, L}),
    L: frozenset({P, F, C}),
    S: frozenset(),
    F: frozenset(),
    C: frozenset(),
    T: frozenset(),
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


_HISTORY = JobTransition.__table__
_ADD_HISTORY = _HISTORY.insert()
_JOBS = Job.__table__


def _values(to: JobState, at: float, message: str | None, fields: dict[str, Any]) -> dict[str, Any]:
    """The columns a move to `to` writes: `fields`, the state, and its timestamp."""
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
    return values


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
    values = _values(to, at, message, fields)
    result = session.execute(
        update(Job)
        .where(col(Job.id) == job.id, col(Job.state) == current)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]  # sqlmodel types execute() as Result; an UPDATE gives a CursorResult
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


@dataclass(slots=True)
class Step:
    """One move of one job, for `transition_many`: like `transition`'s arguments."""

    job_id: int
    attempt: int
    current: JobState
    to: JobState
    at: float
    message: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)


def transition_many(session: Session, steps: list[Step]) -> None:
    """Apply many moves, of many jobs, in a few statements.

    The same rules as `transition`, set-based: every step must be a move
    the table allows; a job's steps (in the order given) must follow on
    from each other, and fold into one conditional UPDATE from its first
    state; rows whose changed columns are the same go in one executemany;
    one history row per step, in one INSERT. When any job is no longer in
    its first state, `StaleState` is raised: nothing is written for
    certain, so the caller rolls back (and may fall back to `transition`).
    """
    folded: dict[int, tuple[JobState, dict[str, Any]]] = {}
    last: dict[int, JobState] = {}
    history: list[dict[str, Any]] = []
    for s in steps:
        if not can_move(s.current, s.to):
            raise IllegalTransition(f"job {s.job_id}: {s.current} -> {s.to} is not allowed")
        if s.job_id in last and last[s.job_id] is not s.current:
            raise IllegalTransition(
                f"job {s.job_id}: a step from {s.current} follows one to {last[s.job_id]}"
            )
        last[s.job_id] = s.to
        first, values = folded.setdefault(s.job_id, (s.current, {}))
        values.update(_values(s.to, s.at, s.message, s.fields))
        history.append(
            {
                "job_id": s.job_id,
                "at": s.at,
                "from_state": s.current.value,
                "to_state": s.to.value,
                "attempt": s.attempt,
                "message": s.message or "",
            }
        )
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for job_id, (first, values) in folded.items():
        keys = tuple(sorted(values))
        row = {f"v_{k}": v for k, v in values.items()}
        row["w_id"], row["w_state"] = job_id, first.value
        groups.setdefault(keys, []).append(row)
    conn = session.connection()
    for keys, rows in groups.items():
        changed = execute_many(conn, _update_of(keys), rows)
        if changed != len(rows):
            raise StaleState(f"{len(rows) - changed} of jobs {_ids(rows)} moved on")
    execute_many(conn, _ADD_HISTORY, history)


@functools.cache
def _update_of(keys: tuple[str, ...]) -> Update:
    """The UPDATE of one job row that sets `keys`, guarded by its first state; built
    once per set of keys (a few kinds of step; building one cost more than running it)."""
    return (
        update(_JOBS)
        .where(_JOBS.c.id == bindparam("w_id"), _JOBS.c.state == bindparam("w_state"))
        .values({k: bindparam(f"v_{k}", type_=_JOBS.c[k].type) for k in keys})
    )


def _ids(rows: list[dict[str, Any]]) -> str:
    return ", ".join(str(r["w_id"]) for r in rows[:10]) + (" ..." if len(rows) > 10 else "")
