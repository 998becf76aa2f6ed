"""Training progress reported by jobs (`schedulearn.runtime.report`).

Owns `Job.progress` (the latest report, shown by `show`, the API and the
web page) and the `progress_record` table, a short history of reports
per job (the last `KEEP`). Agents tail each job's progress file and send
new reports in batches; a report of an older attempt is still history,
and the latest report is the newest by time of any attempt. The goodput
part of a report (adaptive jobs) is kept by `services.goodput`.
"""

from __future__ import annotations

from sqlalchemy import delete, insert, select, update
from sqlmodel import Session, col

from schedulearn.protocol import ProgressBatch, ProgressHistory, ProgressPublic
from schedulearn.server.auth import Caller
from schedulearn.server.errors import NotFound
from schedulearn.server.models import Job, ProgressRecord
from schedulearn.server.services import goodput, profiles, visibility
from schedulearn.server.wakeups import Changes

KEEP = 200


def record(session: Session, job_id: int, batch: ProgressBatch) -> Changes:
    if not batch.reports:
        return Changes()
    found = session.execute(select(col(Job.progress)).where(col(Job.id) == job_id)).first()
    if found is None:
        raise NotFound(f"no job {job_id}")
    newest = max(batch.reports, key=lambda r: r.at)
    latest = found[0]
    if latest is None or float(latest.get("at", 0.0)) <= newest.at:
        session.execute(
            update(Job)
            .where(col(Job.id) == job_id)
            .values(progress=newest.model_dump(mode="json", exclude_defaults=True))
        )
    session.execute(
        insert(ProgressRecord),
        [
            {
                "job_id": job_id,
                "attempt": batch.attempt,
                "at": r.at,
                "report": r.model_dump(mode="json", exclude_defaults=True),
            }
            for r in batch.reports[-KEEP:]
        ],
    )
    _prune(session, job_id)
    goodput.record(session, job_id, batch.reports)
    rated = [r for r in batch.reports if r.samples_per_sec]
    if rated:
        # The newest speed feeds the throughput profiles (issue 6).
        newest_rate = max(rated, key=lambda r: r.at)
        profiles.record_throughput(
            session, job_id, batch.attempt, newest_rate.samples_per_sec or 0.0, newest_rate.at
        )
    session.commit()
    return Changes(jobs={job_id})


def _prune(session: Session, job_id: int) -> None:
    cutoff = session.execute(
        select(col(ProgressRecord.id))
        .where(col(ProgressRecord.job_id) == job_id)
        .order_by(col(ProgressRecord.id).desc())
        .offset(KEEP)
        .limit(1)
    ).scalar()
    if cutoff is not None:
        session.execute(
            delete(ProgressRecord).where(
                col(ProgressRecord.job_id) == job_id,
                ProgressRecord.id <= cutoff,
            )
        )


def latest(job: Job) -> ProgressPublic | None:
    return None if not job.progress else ProgressPublic.model_validate(job.progress)


def history(session: Session, job_id: int, caller: Caller) -> ProgressHistory:
    """The job's recent reports, for its owner and admins (403 otherwise: `visibility`)."""
    visibility.require_details(session, job_id, caller, "progress reports")
    rows = session.execute(
        select(ProgressRecord.report)
        .where(col(ProgressRecord.job_id) == job_id)
        .order_by(col(ProgressRecord.id))
    ).scalars()
    return ProgressHistory(job_id=job_id, reports=[ProgressPublic.model_validate(r) for r in rows])
