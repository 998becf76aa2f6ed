"""Wall-clock limits against the database (SQLite and PostgreSQL): a scheduler
round's `timelimits.enforce` ends running jobs past their limit, and waiting
jobs whose earlier runs used it up, `timeout` with the reason."""

from __future__ import annotations

from sqlalchemy import update
from sqlmodel import Session, col

from schedulearn.protocol import JobSpec, JobState
from schedulearn.server.auth import Caller
from schedulearn.server.auth import Role as CallerRole
from schedulearn.server.models import Job
from schedulearn.server.services import jobs, timelimits

ANN = Caller("ann", CallerRole.USER)


def submit(session: Session, time_limit: str) -> int:
    given = JobSpec.model_validate({"command": "true", "time_limit": time_limit})
    [result] = jobs.submit(session, [(given, ANN)], 1.0)
    assert isinstance(result, jobs.Submitted)
    job_id = result.jobs[0].id
    assert job_id is not None
    return job_id


def state_of(session: Session, job_id: int) -> tuple[JobState, str]:
    session.expire_all()
    job = session.get(Job, job_id)
    assert job is not None
    return JobState(job.state), job.message or ""


def test_enforce_ends_jobs_that_used_up_their_limit_and_no_other(session: Session) -> None:
    running = submit(session, "1m")
    fresh = submit(session, "1m")
    requeued = submit(session, "0:01:00")  # Slurm's clock form: 60 s
    session.execute(
        update(Job)
        .where(col(Job.id).in_([running, fresh]))
        .values(state=JobState.RUNNING, started_at=100.0, attempt=1)
    )
    # Preempted after 60 s of run time: back in the queue, its time used up.
    session.execute(update(Job).where(col(Job.id) == requeued).values(service_seconds=60.0))
    session.execute(update(Job).where(col(Job.id) == fresh).values(started_at=150.0))
    session.commit()

    assert timelimits.enforce(session, 159.0).jobs == {requeued}
    assert state_of(session, running)[0] is JobState.RUNNING
    changes = timelimits.enforce(session, 160.0)
    assert changes.jobs == {running} and changes.scheduler
    state, message = state_of(session, running)
    assert state is JobState.TIMEOUT
    assert message.startswith("stopped at its time limit (1m, --time)")
    assert state_of(session, requeued)[0] is JobState.TIMEOUT
    assert state_of(session, fresh)[0] is JobState.RUNNING
