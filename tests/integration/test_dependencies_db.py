"""Job dependencies against the database (SQLite and PostgreSQL): what became of
the jobs a waiting job names (arrays as a whole), read for the scheduler's
snapshot, and the cancellation of jobs whose dependency can never be met."""

from __future__ import annotations

import pytest
from sqlalchemy import update
from sqlmodel import Session, col

from schedulearn.core import eligibility
from schedulearn.core.dependencies import Outcome
from schedulearn.protocol import JobSpec, JobState
from schedulearn.server.auth import Caller
from schedulearn.server.auth import Role as CallerRole
from schedulearn.server.errors import BadRequest
from schedulearn.server.models import Job
from schedulearn.server.services import dependencies, jobs, snapshot

ANN = Caller("ann", CallerRole.USER)


def submit(session: Session, **spec: object) -> list[int]:
    [result] = jobs.submit(
        session, [(JobSpec.model_validate({"command": "true", **spec}), ANN)], 1.0
    )
    if isinstance(result, Exception):
        raise result
    return [j.id for j in result.jobs]


def end(session: Session, job_id: int, state: JobState) -> None:
    session.execute(update(Job).where(col(Job.id) == job_id).values(state=state))
    session.commit()


def test_outcomes_read_jobs_and_whole_arrays(session: Session) -> None:
    [plain] = submit(session)
    array = submit(session, count=3)
    end(session, array[0], JobState.SUCCEEDED)
    end(session, array[1], JobState.FAILED)
    got = dependencies.outcomes(session, [plain, array[0], array[1], 999])
    assert got == {
        plain: Outcome(tasks=1, ended=0, succeeded=0),
        array[0]: Outcome(tasks=3, ended=2, succeeded=1, array=True),
        # A task named by its own id is that task alone.
        array[1]: Outcome(tasks=1, ended=1, succeeded=0),
    }
    with pytest.raises(BadRequest, match="names job 999, which does not exist"):
        submit(session, dependency="afterok:999")


def test_the_snapshot_says_why_a_job_waits_and_settle_cancels_the_doomed(
    session: Session,
) -> None:
    [first] = submit(session)
    [ok_after] = submit(session, dependency=f"afterok:{first}")
    [not_ok_after] = submit(session, dependency=f"afternotok:{first}")
    [chained] = submit(session, dependency=f"afterany:{not_ok_after}")
    [doomed_chain] = submit(session, dependency=f"afterok:{not_ok_after}")
    view = snapshot.build(session, 10.0).view
    assert eligibility.set_aside(view)[ok_after] == f"waits for job {first} to succeed"
    assert dependencies.settle(session, 10.0) == 0

    end(session, first, JobState.SUCCEEDED)
    view = snapshot.build(session, 20.0).view
    assert ok_after not in eligibility.set_aside(view)
    # afternotok can never hold now; then neither can afterok on that job
    # (cancelled in the same settle, a round later), while afterany holds.
    assert dependencies.settle(session, 20.0) == 2
    session.expire_all()
    cancelled = session.get(Job, not_ok_after)
    assert cancelled is not None and cancelled.state == JobState.CANCELLED
    assert cancelled.message == (
        f"dependency afternotok:{first} can never be met: job {first} succeeded"
    )
    chain = session.get(Job, doomed_chain)
    assert chain is not None and chain.state == JobState.CANCELLED
    assert f"job {not_ok_after} did not succeed" in (chain.message or "")
    after = session.get(Job, chained)
    assert after is not None and after.state == JobState.PENDING
    assert chained not in eligibility.set_aside(snapshot.build(session, 30.0).view)
