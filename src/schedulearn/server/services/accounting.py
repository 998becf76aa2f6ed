"""Per-job accounting (`schedulearn acct`, `GET /api/v1/acct`), like Slurm's `sacct`.

Owns nothing; it reads the job table and its history. A job's times and
GPU-hours come from its attempts' holds (`services.holds`), the rule the
per-user and per-queue totals of `services.usage` sum too.

A report keeps the jobs active at some time in [since, now] (not ended
before `since`), filtered by user, queue and state, oldest first. Every
field of a row is one every signed-in user sees of any job
(`services.visibility`: times, size, restarts, exit code), so a report
lists every job the filters keep, whoever owns it, as `schedulearn jobs`
does, and never a detail (command, environment, message, logs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, func, or_, select
from sqlmodel import Session, col

from schedulearn.core.fairshare_queues import DEFAULT_QUEUE
from schedulearn.protocol import AcctReport, AcctRow, JobState
from schedulearn.server.models import Job
from schedulearn.server.services.holds import Hold, attempt_holds
from schedulearn.server.services.queues import job_queue_column
from schedulearn.server.services.usage import parse_since

DEFAULT_SINCE = "7d"
MAX_ROWS = 10_000


@dataclass(frozen=True, slots=True)
class AcctFilter:
    """What a report keeps: jobs of `user`, in `queue`, in one of `states`
    (None or empty: any)."""

    user: str | None = None
    queue: str | None = None
    states: tuple[JobState, ...] = ()


def report(
    session: Session, where: AcctFilter, since_text: str, limit: int, now: float
) -> AcctReport:
    """The jobs `where` keeps that were active since `since_text`, oldest first."""
    since = parse_since(since_text, now)
    conds = _conditions(where, since)
    total = session.execute(select(func.count()).select_from(Job).where(*conds)).scalar_one()
    jobs = list(
        session.execute(select(Job).where(*conds).order_by(col(Job.id)).limit(limit)).scalars()
    )
    holds: dict[int, list[Hold]] = defaultdict(list)
    for hold in attempt_holds(session, [j.id for j in jobs]):
        holds[hold.job_id].append(hold)
    rows = [_row(job, holds.get(job.id or 0, []), now) for job in jobs]
    return AcctReport(since=since, until=now, total=total, rows=rows)


def _conditions(where: AcctFilter, since: float) -> list[ColumnElement[bool]]:
    conds: list[ColumnElement[bool]] = [
        or_(col(Job.ended_at).is_(None), col(Job.ended_at) >= since)
    ]
    if where.user:
        conds.append(col(Job.user) == where.user)
    if where.queue:
        # A job that names no queue counts for the default queue.
        named = [where.queue, ""] if where.queue == DEFAULT_QUEUE else [where.queue]
        conds.append(job_queue_column.in_(named))
    if where.states:
        conds.append(col(Job.state).in_(list(dict.fromkeys(where.states))))
    return conds


def _row(job: Job, holds: Iterable[Hold], now: float) -> AcctRow:
    held = list(holds)
    first = min((h.start for h in held), default=None)
    # A job that never started waited until it ended (cancelled in the queue) or till now.
    waited_until = first if first is not None else (job.ended_at or now)
    return AcctRow(
        id=job.id or 0,
        name=job.name,
        user=job.user,
        queue=job.queue or DEFAULT_QUEUE,
        state=job.state,
        exit_code=job.exit_code,
        submitted_at=job.submitted_at,
        started_at=first,
        ended_at=job.ended_at,
        waited_seconds=round(max(0.0, waited_until - job.submitted_at), 3),
        ran_seconds=round(sum(h.seconds(0.0, now) for h in held), 3),
        gpu_hours=round(sum(h.seconds(0.0, now) * h.gpus for h in held) / 3600.0, 6),
        restarts=job.restarts,
        preemptions=job.preemptions,
    )
