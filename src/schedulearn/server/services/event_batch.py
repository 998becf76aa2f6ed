"""A batch of agent events recorded set-based: a few statements per batch.

Owns the fast path of `POST /api/v1/agent/events`. The rules are
`lifecycle`'s (`part_started`, `part_exited`) and `agents._record_start`'s,
applied to many jobs at once instead of one ORM load and flush per event:

1. two reads: the batch's jobs (state, attempt, what accrues on exit) and
   every part of them;
2. the events are played, in order, against those rows in memory, which
   decides each event's effect and acknowledgement exactly as the
   one-by-one path would (an event of an old attempt moves no job);
3. the writes, one statement each for the whole batch: the parts that
   changed (an executemany, each row conditional on the status it was
   read in), the GPUs of the parts that exited (an executemany delete),
   and the jobs' moves through `states.transition_many` (conditional on
   the state they were read in, plus their history rows).

An event this path does not handle (an exit of a gang's part, or of a
job being preempted, cancelled or lost, and every later event of that
job in the batch) is handed back: the caller applies it through
`lifecycle` after these writes, in the same transaction. Should a row
have changed under us, `StaleState` rolls the whole transaction back and
the caller records the events one by one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, select
from sqlmodel import Session, col

from schedulearn.protocol import Ack, EventKind, JobEventReport, JobState
from schedulearn.server.bulk import execute_many
from schedulearn.server.models import Allocation, Job, JobPart, PartStatus
from schedulearn.server.services import lifecycle
from schedulearn.server.states import StaleState, Step, transition_many
from schedulearn.server.wakeups import Changes

_LIVE = (PartStatus.ASSIGNED, PartStatus.RUNNING)
_PARTS = JobPart.__table__
_ALLOCATIONS = Allocation.__table__
# The batch's statements, built once: every batch runs them, and building a
# statement and its cache key costs more than SQLite takes to run it.
_JOB_ROWS = select(
    col(Job.id),
    col(Job.state),
    col(Job.attempt),
    col(Job.started_at),
    col(Job.placement),
    col(Job.service_seconds),
    col(Job.attained_gpu_seconds),
).where(col(Job.id).in_(bindparam("ids", expanding=True)))
_PART_ROWS = (
    select(
        _PARTS.c.job_id,
        _PARTS.c.attempt,
        _PARTS.c.id,
        _PARTS.c.node,
        _PARTS.c.rank,
        _PARTS.c.status,
        _PARTS.c.exit_code,
        _PARTS.c.last_reported,
    )
    .where(_PARTS.c.job_id.in_(bindparam("ids", expanding=True)))
    .order_by(_PARTS.c.rank)
)
_FREE = _ALLOCATIONS.delete().where(
    _ALLOCATIONS.c.node == bindparam("w_node"),
    _ALLOCATIONS.c.job_id == bindparam("w_job"),
    _ALLOCATIONS.c.attempt == bindparam("w_attempt"),
)
_WRITE_PART = (
    _PARTS.update()
    .where(_PARTS.c.id == bindparam("w_id"), _PARTS.c.status == bindparam("w_was"))
    .values(
        status=bindparam("v_status"),
        exit_code=bindparam("v_exit_code"),
        last_reported=bindparam("v_last_reported"),
    )
)


@dataclass(slots=True)
class _Job:
    id: int
    state: JobState
    attempt: int
    started_at: float | None
    placement: dict[str, list[int]] | None
    service_seconds: float
    attained_gpu_seconds: float


@dataclass(slots=True)
class _Part:
    id: int
    node: str
    rank: int
    status: str
    was: str
    exit_code: int | None
    last_reported: float
    touched: bool = False
    freed: bool = False


@dataclass(slots=True)
class BatchPlan:
    """What the batch decided: acks (None where `slow` applies it), the moves, the rest."""

    acks: list[Ack | None]
    changes: Changes = field(default_factory=Changes)
    slow: list[int] = field(default_factory=list)


def record(session: Session, reports: list[JobEventReport], now: float) -> BatchPlan:
    """Record what can be recorded set-based; `plan.slow` lists the events left to apply."""
    conn = session.connection()
    ids = sorted({r.job_id for r in reports})
    job_rows = conn.execute(_JOB_ROWS, {"ids": ids})
    jobs = {r[0]: _Job(r[0], JobState(r[1]), *r[2:]) for r in job_rows}
    parts: dict[tuple[int, int], list[_Part]] = {}
    part_rows = conn.execute(_PART_ROWS, {"ids": list(jobs)})
    for r in part_rows:
        parts.setdefault((r[0], r[1]), []).append(_Part(r[2], r[3], r[4], r[5], r[5], *r[6:]))

    plan = BatchPlan(acks=[])
    steps: list[Step] = []
    slow_jobs: set[int] = set()
    for i, report in enumerate(reports):
        job = jobs.get(report.job_id)
        ack: Ack | None
        if job is None:
            ack = Ack(ignored=True)
        elif job.id in slow_jobs:
            ack = None
        elif report.kind is EventKind.STARTED:
            ack = _started(job, parts.get((job.id, report.attempt), []), report, now, steps)
            plan.changes.jobs.add(job.id)
        else:
            ack = _exited(job, parts.get((job.id, report.attempt), []), report, now, steps, plan)
        if ack is None:
            slow_jobs.add(report.job_id)
            plan.slow.append(i)
        plan.acks.append(ack)

    _write_parts(session, [p for ps in parts.values() for p in ps if p.touched])
    freed = [
        {"w_node": p.node, "w_job": job_id, "w_attempt": attempt}
        for (job_id, attempt), ps in parts.items()
        for p in ps
        if p.freed
    ]
    execute_many(conn, _FREE, freed)
    transition_many(session, steps)
    return plan


def _started(
    job: _Job, parts: list[_Part], report: JobEventReport, now: float, steps: list[Step]
) -> Ack:
    """`agents._record_start`: the part runs; the job too, if this is its attempt."""
    for p in parts:
        if p.status == PartStatus.ASSIGNED and (not report.node or p.node == report.node):
            p.status, p.last_reported, p.touched = PartStatus.RUNNING, now, True
    if job.attempt == report.attempt and job.state is JobState.ASSIGNED:
        steps.append(Step(job.id, job.attempt, job.state, JobState.RUNNING, now))
        job.state, job.started_at = JobState.RUNNING, now
    return Ack()


def _exited(
    job: _Job,
    siblings: list[_Part],
    report: JobEventReport,
    now: float,
    steps: list[Step],
    plan: BatchPlan,
) -> Ack | None:
    """`lifecycle.part_exited` for a job of one part; None where that is not the case."""
    if len(siblings) > 1:
        return None  # a gang: the other parts decide, and may get stop orders
    parts = [p for p in siblings if p.node == report.node] if report.node else siblings
    if not parts:
        return Ack(ignored=True)
    part = parts[0]
    current = report.attempt == job.attempt
    if current and part.status in _LIVE and job.state not in (JobState.ASSIGNED, JobState.RUNNING):
        return None  # preempting, cancelled, lost: lifecycle's other rules
    plan.changes.scheduler = True
    plan.changes.jobs.add(job.id)
    if part.status not in _LIVE:
        return Ack()
    part.status, part.exit_code, part.touched, part.freed = (
        PartStatus.EXITED,
        report.exit_code,
        True,
        True,
    )
    if not current:
        return Ack()
    failed_to_start = report.kind is EventKind.FAILED_TO_START
    code = report.exit_code
    gang = " (one part of a gang)" if part.rank > 0 else ""
    fields: dict[str, Any] = {"exit_code": code if failed_to_start or code != 0 else 0}
    if job.started_at is not None:
        ran = max(0.0, now - job.started_at)
        held = sum(len(g) for g in (job.placement or {}).values())
        fields["service_seconds"] = job.service_seconds + ran
        fields["attained_gpu_seconds"] = job.attained_gpu_seconds + ran * held
    if failed_to_start or code != 0:
        why = lifecycle.exit_why(part.node, code, report.message, gang, failed_to_start)
        to = JobState.FAILED
    else:
        why, to = "", JobState.SUCCEEDED
    steps.append(Step(job.id, job.attempt, job.state, to, now, why, fields))
    job.state = to
    return Ack()


def _write_parts(session: Session, touched: list[_Part]) -> None:
    if not touched:
        return
    rows = [
        {
            "w_id": p.id,
            "w_was": p.was,
            "v_status": p.status,
            "v_exit_code": p.exit_code,
            "v_last_reported": p.last_reported,
        }
        # In id order, like every bulk update of parts: concurrent writers
        # then lock rows in the same order and cannot deadlock on them.
        for p in sorted(touched, key=lambda p: p.id)
    ]
    if execute_many(session.connection(), _WRITE_PART, rows) != len(rows):
        raise StaleState("a part of the batch changed while it was being recorded")
