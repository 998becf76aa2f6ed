"""Who used what: GPU-hours, jobs and mean wait per user or per queue (`schedulearn usage`).

Owns nothing; it reads the job history like Slurm's `sreport` reads its
accounting. Over a window [since, now]:
- GPU-hours: each attempt of a job holds the GPUs of its parts
  (`job_part`) from its move to `assigned` until it leaves the holding
  states (back to `pending`, or an end), or until now; clipped to the window;
- jobs: those submitted in the window; started: of those, the ones that
  have started; mean wait: from submission to their first start.
A job that names no queue counts for the default queue.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import UTC, datetime
from typing import cast

from sqlalchemy import ColumnElement, func, select, union
from sqlmodel import Session, col

from schedulearn.core.fairshare_queues import DEFAULT_QUEUE
from schedulearn.protocol import JobState, UsageBy, UsageReport, UsageRow
from schedulearn.server.errors import BadRequest
from schedulearn.server.models import Job, JobPart, JobTransition
from schedulearn.server.services.queues import job_queue_column

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# Leaving these ends an attempt's hold on its GPUs.
_RELEASED = (
    JobState.PENDING,
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.CANCELLED,
    JobState.LOST,
    JobState.TIMEOUT,
)
_HOLDING = (JobState.ASSIGNED, JobState.RUNNING, JobState.PREEMPTING)
DEFAULT_SINCE = "30d"


def parse_since(text: str, now: float) -> float:
    """`7d`, `12h`, `90m`, `2w` back from now, or a UTC date / date-time, as a unix time."""
    span = _SPAN.match(text)
    if span:
        return now - float(span.group(1)) * _UNIT_SECONDS[span.group(2)]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadRequest(
            f"since {text!r} is neither a span back from now (90m, 12h, 7d, 2w) nor a date "
            "(2026-11-01 or 2026-11-01T08:00, UTC)"
        ) from None
    at = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    if at > now:
        raise BadRequest(f"since {text!r} is in the future; give an earlier date or a span")
    return at


def report(session: Session, by: UsageBy, since_text: str, now: float) -> UsageReport:
    since = parse_since(since_text, now)
    key_of = _keys(session, by)
    hours: dict[str, float] = defaultdict(float)
    for job_id, gpu_seconds in _gpu_seconds(session, since, now).items():
        if job_id in key_of:
            hours[key_of[job_id]] += gpu_seconds / 3600.0
    jobs: dict[str, int] = defaultdict(int)
    started: dict[str, int] = defaultdict(int)
    waited: dict[str, float] = defaultdict(float)
    first = (
        select(col(JobTransition.job_id), func.min(col(JobTransition.at)).label("first"))
        .where(col(JobTransition.to_state) == JobState.ASSIGNED)
        .group_by(col(JobTransition.job_id))
        .subquery()
    )
    for key, submitted, first_start in session.execute(
        select(_column(by), col(Job.submitted_at), first.c.first)
        .outerjoin(first, first.c.job_id == col(Job.id))
        .where(col(Job.submitted_at) >= since)
    ):
        key = key or (DEFAULT_QUEUE if by is UsageBy.QUEUE else "")
        jobs[key] += 1
        if first_start is not None:
            started[key] += 1
            waited[key] += max(0.0, first_start - submitted)
    rows = [
        UsageRow(
            key=k,
            gpu_hours=round(hours.get(k, 0.0), 6),
            jobs=jobs.get(k, 0),
            started=started.get(k, 0),
            mean_wait_seconds=round(waited[k] / started[k], 3) if started.get(k) else None,
        )
        for k in sorted({*hours, *jobs})
    ]
    rows.sort(key=lambda r: (-r.gpu_hours, r.key))
    return UsageReport(by=by, since=since, until=now, rows=rows)


def _column(by: UsageBy) -> ColumnElement[str]:
    return cast("ColumnElement[str]", col(Job.user)) if by is UsageBy.USER else job_queue_column


def _keys(session: Session, by: UsageBy) -> dict[int, str]:
    """Job id -> its user or queue, for every job that held GPUs at some time."""
    held = select(col(JobPart.job_id)).distinct()
    out: dict[int, str] = {}
    for job_id, key in session.execute(
        select(col(Job.id), _column(by)).where(col(Job.id).in_(held))
    ):
        out[job_id] = key or (DEFAULT_QUEUE if by is UsageBy.QUEUE else "")
    return out


def _gpu_seconds(session: Session, since: float, now: float) -> dict[int, float]:
    """GPU-seconds each job's attempts held within [since, now]."""
    # Only jobs that changed state in the window or hold GPUs now can have
    # held GPUs in it (an attempt's start and end are both transitions).
    relevant = union(
        select(col(JobTransition.job_id)).where(col(JobTransition.at) >= since),
        select(col(Job.id)).where(col(Job.state).in_(_HOLDING)),
    ).subquery()
    gpus: dict[tuple[int, int], int] = defaultdict(int)
    for job_id, attempt, held in session.execute(
        select(col(JobPart.job_id), col(JobPart.attempt), col(JobPart.gpus)).where(
            col(JobPart.job_id).in_(select(relevant.c[0]))
        )
    ):
        gpus[(job_id, attempt)] += len(held or ())
    starts: dict[tuple[int, int], float] = {}
    ends: dict[tuple[int, int], float] = {}
    for job_id, attempt, to_state, at in session.execute(
        select(
            col(JobTransition.job_id),
            col(JobTransition.attempt),
            col(JobTransition.to_state),
            col(JobTransition.at),
        )
        .where(col(JobTransition.job_id).in_(select(relevant.c[0])))
        .order_by(col(JobTransition.id))
    ):
        key = (job_id, attempt)
        state = JobState(to_state)
        if state is JobState.ASSIGNED:
            starts.setdefault(key, at)
        elif state in _RELEASED and key in starts:
            ends.setdefault(key, at)
    out: dict[int, float] = defaultdict(float)
    for key, start in starts.items():
        end = ends.get(key, now)
        seconds = min(end, now) - max(start, since)
        if seconds > 0:
            out[key[0]] += seconds * gpus.get(key, 0)
    return out
