"""Job output: batches in from agents, pages out to users.

Owns the `log_record` table. Lines are stored in arrival order; a line's
row id is its position in the job's log, so a reader asks for "lines
after N" and a follower resumes exactly where it stopped.
"""

from __future__ import annotations

from sqlalchemy import insert, select
from sqlmodel import Session, col

from schedulearn.protocol import JobState, LogBatch, LogLinePublic, LogPage, LogStream
from schedulearn.server.auth import Caller
from schedulearn.server.errors import NotFound
from schedulearn.server.models import Job, LogRecord
from schedulearn.server.services import visibility
from schedulearn.server.wakeups import Changes


def append(session: Session, job_id: int, batch: LogBatch) -> Changes:
    if not batch.lines:
        return Changes()
    if session.get(Job, job_id) is None:
        raise NotFound(f"no job {job_id}")
    session.execute(
        insert(LogRecord),
        [
            {
                "job_id": job_id,
                "attempt": batch.attempt,
                "node": batch.node,
                "seq": line.seq,
                "stream": line.stream.value,
                "text": line.text,
                "at": line.at,
            }
            for line in batch.lines
        ],
    )
    session.commit()
    return Changes(jobs={job_id})


def page_for(
    session: Session, job_id: int, caller: Caller, after: int, limit: int
) -> tuple[LogPage, float | None]:
    """`page`, for a caller who may see the job's logs (403 otherwise: `visibility`).

    Checked once, before a stream's first page: a job's owner never changes.
    """
    visibility.require_details(session, job_id, caller, "logs")
    return page(session, job_id, after, limit)


def page(session: Session, job_id: int, after: int, limit: int) -> tuple[LogPage, float | None]:
    """Lines of job `job_id` after row `after`; also when the job ended (None: not yet)."""
    found = session.execute(
        select(col(Job.state), col(Job.ended_at)).where(col(Job.id) == job_id)
    ).first()
    if found is None:
        raise NotFound(f"no job {job_id}; list jobs with `schedulearn jobs`")
    rows = session.execute(
        select(
            col(LogRecord.id),
            col(LogRecord.attempt),
            col(LogRecord.stream),
            col(LogRecord.text),
            col(LogRecord.at),
        )
        .where(col(LogRecord.job_id) == job_id, col(LogRecord.id) > after)
        .order_by(col(LogRecord.id))
        .limit(limit)
    ).all()
    lines = [
        LogLinePublic(seq=r[0], attempt=r[1], stream=LogStream(r[2]), text=r[3], at=r[4])
        for r in rows
    ]
    next_after = lines[-1].seq if lines else after
    state, ended_at = found
    ended = ended_at if JobState(state).is_final else None
    return LogPage(job_id=job_id, lines=lines, next_after=next_after), ended
