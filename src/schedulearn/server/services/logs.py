"""Job output: batches in from agents, pages out to users, kept under a per-job cap.

Owns the `log_record` and `job_log_usage` tables. Lines are stored in
arrival order; a line's row id is its position in the job's log, so a
reader asks for "lines after N" and a follower resumes exactly where it
stopped.

One job cannot fill the database: of its output, the first half of
`log_stored_max_bytes` is kept whole (the head) and, past it, only the
latest half (the tail: the oldest tail lines are deleted as new ones
come, in the same transaction). When the head fills, a marker row goes
between head and tail; it is rewritten whenever lines are cut, to say
exactly how many bytes and lines were cut and where the whole output is:
from then on every log batch's acknowledgement asks the agent to upload
the attempt's whole output when it ends (`services.full_logs`;
`schedulearn logs --full`). A line's size is its UTF-8 bytes plus one
(its newline), as `logs --full` prints it.

Retention (`expire`): the logs of jobs that ended more than
`log_retention_days` ago are deleted, stored lines and full logs alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import bindparam, delete, select, update
from sqlmodel import Session, col

from schedulearn.protocol import JobState, LogBatch, LogLinePublic, LogPage, LogStream
from schedulearn.server.auth import Caller
from schedulearn.server.bulk import execute_many
from schedulearn.server.errors import NotFound
from schedulearn.server.models import Job, JobLogUsage, LogRecord
from schedulearn.server.services import full_logs, visibility
from schedulearn.server.wakeups import Changes

# Trimming the tail takes it down to this fraction of its half, so a busy
# job's batches do not each pay for a trim.
_TRIM_TO = 0.9
_TRIM_PAGE = 2000


@dataclass(frozen=True, slots=True)
class Appended:
    changes: Changes
    # The job's stored log is cut: the agent should upload the attempt's whole output.
    full_log_wanted: bool


def line_bytes(text: str) -> int:
    return len(text.encode("utf-8", errors="replace")) + 1


def marker_text(job_id: int, usage: JobLogUsage, cap: int, node: str, attempt: int) -> str:
    where = (
        f"`schedulearn logs --full {job_id}` (or the job page's download) has every line once "
        f"the attempt ends and its agent uploads it; until then it is on node {node!r}, in "
        f"jobs/{job_id}.{attempt}/output.log under the agent's state directory"
    )
    if not usage.cut_bytes:
        return (
            f"[schedulearn: the first {usage.head_bytes} bytes of this job's output are kept "
            f"above; below, only the latest {cap - cap // 2} bytes are kept (the database holds "
            f"at most {cap} bytes of one job's output); nothing is cut yet. {where}]"
        )
    return (
        f"[schedulearn: {usage.cut_bytes} bytes ({usage.cut_lines} lines) of output were cut "
        f"here to keep this job's stored log under {cap} bytes (the first and the latest "
        f"{cap // 2} bytes are kept). {where}]"
    )


_INSERT_LINES = LogRecord.__table__.insert()


def append(
    session: Session,
    job_id: int,
    batch: LogBatch,
    cap: int,
    commit: bool = True,
    known: bool = False,
) -> Appended:
    """Store a batch under the job's cap (`cap`: `log_stored_max_bytes`); not
    `commit`: flushed only, for a caller that commits many batches together;
    `known`: the caller knows the job exists."""
    if not batch.lines:
        return Appended(Changes(), False)
    if not known and session.get(Job, job_id) is None:
        raise NotFound(f"no job {job_id}")
    # Locked (PostgreSQL): a gang's parts ship their batches at the same time.
    usage = session.get(JobLogUsage, job_id, with_for_update=True) or JobLogUsage(job_id=job_id)
    stored = _last_seq(session, job_id, batch, usage.marker_id)
    lines = [line for line in batch.lines if stored is None or line.seq > stored]
    if not lines:
        # A batch stored before its acknowledgement was lost (server killed, reply
        # dropped): the agent sends it again, and it is acknowledged, not stored twice.
        _end(session, commit)
        return Appended(Changes(), usage.marker_id is not None)
    head_cap, tail_cap = cap // 2, cap - cap // 2
    head: list[dict[str, object]] = []
    tail: list[dict[str, object]] = []
    # Counted here, written to the ORM row once: an attribute set per line cost
    # a tenth of storing a batch.
    head_bytes, tail_bytes = usage.head_bytes, 0
    for line in lines:
        row = {
            "job_id": job_id,
            "attempt": batch.attempt,
            "node": batch.node,
            "seq": line.seq,
            "stream": line.stream.value,
            "text": line.text,
            "at": line.at,
        }
        size = line_bytes(line.text)
        if usage.marker_id is None and not tail and head_bytes + size <= head_cap:
            head.append(row)
            head_bytes += size
        else:
            tail.append(row)
            tail_bytes += size
    usage.head_bytes = head_bytes
    # Plain INSERTs of many rows, handed to the driver ready-made (the ORM's
    # bulk insert spent a third of the time on its own bookkeeping for rows
    # it does not keep, and SQLAlchemy's executemany half as much again); on
    # PostgreSQL one statement over arrays (`bulk`): psycopg's executemany sent
    # one INSERT a line, and PostgreSQL answered each on its own.
    conn = session.connection()
    if head:
        execute_many(conn, _INSERT_LINES, head)
    if tail:
        if usage.marker_id is None:
            marker = LogRecord(
                job_id=job_id,
                attempt=batch.attempt,
                node=batch.node,
                seq=0,
                stream=LogStream.STDERR.value,
                text="",
                at=time.time(),
            )
            session.add(marker)
            session.flush()
            usage.marker_id = marker.id
        execute_many(conn, _INSERT_LINES, tail)
        usage.tail_bytes += tail_bytes
        if usage.tail_bytes > tail_cap:
            _trim(session, usage, int(tail_cap * _TRIM_TO))
        session.execute(
            update(LogRecord)
            .where(LogRecord.id == usage.marker_id)  # type: ignore[arg-type]
            .values(text=marker_text(job_id, usage, cap, batch.node, batch.attempt))
        )
    session.add(usage)
    _end(session, commit)
    return Appended(Changes(jobs={job_id}), usage.marker_id is not None)


def _end(session: Session, commit: bool) -> None:
    if commit:
        session.commit()
    else:
        session.flush()


def _last_seq(session: Session, job_id: int, batch: LogBatch, marker_id: int | None) -> int | None:
    """The highest `seq` stored of this run (job, attempt, node), or None.

    An agent numbers a run's lines in order and re-sends from its last
    acknowledged line, so lines at or below it are already here. The
    newest such row is the run's highest (rows go in in `seq` order);
    reading back along the job's (job_id, id) index finds it quickly.
    """
    params = {"job": job_id, "attempt": batch.attempt, "node": batch.node, "marker": marker_id or 0}
    found = session.connection().execute(_LAST_SEQ, params).first()
    return None if found is None else int(found[0])


# Built once: every log batch reads it.
_LAST_SEQ = (
    select(col(LogRecord.seq))
    .where(
        col(LogRecord.job_id) == bindparam("job"),
        col(LogRecord.attempt) == bindparam("attempt"),
        col(LogRecord.node) == bindparam("node"),
        col(LogRecord.id) != bindparam("marker"),
    )
    .order_by(col(LogRecord.id).desc())
    .limit(1)
)


def _trim(session: Session, usage: JobLogUsage, keep: int) -> None:
    """Delete the oldest tail lines until the tail holds at most `keep` bytes."""
    over = usage.tail_bytes - keep
    last_id: int | None = None
    after = usage.marker_id or 0
    while over > 0:
        rows = session.execute(
            select(col(LogRecord.id), col(LogRecord.text))
            .where(col(LogRecord.job_id) == usage.job_id, col(LogRecord.id) > after)
            .order_by(col(LogRecord.id))
            .limit(_TRIM_PAGE)
        ).all()
        if not rows:
            break
        for row_id, text in rows:
            size = line_bytes(text)
            over -= size
            usage.tail_bytes -= size
            usage.cut_bytes += size
            usage.cut_lines += 1
            last_id = row_id
            if over <= 0:
                break
        after = last_id or after
    if last_id is not None:
        session.execute(
            delete(LogRecord).where(
                LogRecord.job_id == usage.job_id,  # type: ignore[arg-type]
                LogRecord.id > (usage.marker_id or 0),  # type: ignore[arg-type, operator]
                LogRecord.id <= last_id,  # type: ignore[arg-type, operator]
            )
        )


def stored_bytes(session: Session, job_id: int) -> int:
    """What the job's stored log holds, by the same count as the cap."""
    usage = session.get(JobLogUsage, job_id)
    return 0 if usage is None else usage.head_bytes + usage.tail_bytes


def is_cut(session: Session, job_id: int) -> bool:
    usage = session.get(JobLogUsage, job_id)
    return usage is not None and usage.cut_lines > 0


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
    # The database's own rows, not validated again: a page holds up to ten
    # thousand lines.
    lines = [
        LogLinePublic.model_construct(
            seq=r[0], attempt=r[1], stream=LogStream(r[2]), text=r[3], at=r[4]
        )
        for r in rows
    ]
    next_after = lines[-1].seq if lines else after
    state, ended_at = found
    ended = ended_at if JobState(state).is_final else None
    return LogPage.model_construct(job_id=job_id, lines=lines, next_after=next_after), ended


def expire(
    session: Session, store: Path, now: float, retention_days: float, most: int = 200
) -> int:
    """Delete the logs of up to `most` jobs that ended over `retention_days` ago; how many."""
    if retention_days <= 0:
        return 0
    cutoff = now - retention_days * 86400.0
    final = [s.value for s in JobState if s.is_final]
    old = session.execute(
        select(col(Job.id))
        .where(
            col(Job.state).in_(final),
            col(Job.ended_at) < cutoff,
            (
                select(col(LogRecord.id)).where(col(LogRecord.job_id) == col(Job.id)).exists()
                | select(col(JobLogUsage.job_id))
                .where(col(JobLogUsage.job_id) == col(Job.id))
                .exists()
                | full_logs.has_any(Job.id)
            ),
        )
        .limit(most)
    ).scalars()
    gone = [job_id for job_id in old if job_id is not None]
    if not gone:
        return 0
    session.execute(delete(LogRecord).where(LogRecord.job_id.in_(gone)))  # type: ignore[attr-defined]
    session.execute(delete(JobLogUsage).where(JobLogUsage.job_id.in_(gone)))  # type: ignore[attr-defined]
    full_logs.forget(session, store, gone)
    session.commit()
    return len(gone)
