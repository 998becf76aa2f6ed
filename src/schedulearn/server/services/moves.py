"""An admin's move of a running job: the same path as a policy's `Resize`.

Owns nothing; it checks the move with the same ledger a scheduling pass
uses (the job must run and be preemptible, the target GPUs free, the
size within the job's range, CPUs and memory fitting) and then stops the
job for checkpoint and restart on the target (`scheduling.resize`).
Useful to drain a node, and to test migration without a policy.
"""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from schedulearn.core import InvalidDecision, Placement, Resize
from schedulearn.protocol import JobMove, JobPublic, JobState
from schedulearn.server.errors import BadRequest, Conflict, NotFound
from schedulearn.server.models import Job
from schedulearn.server.services import jobs, scheduling, snapshot
from schedulearn.server.states import StaleState
from schedulearn.server.wakeups import Changes


def move(
    session: Session, job_id: int, body: JobMove, now: float, default_policy: str
) -> tuple[JobPublic, Changes]:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    if job.state not in (JobState.RUNNING.value, JobState.ASSIGNED.value):
        raise Conflict(f"job {job_id} is {job.state}; only a running job can be moved")
    if not job.preemptible:
        raise BadRequest(
            f"job {job_id} is not preemptible, so it is never moved or resized; "
            "submit it with preemptible: true"
        )
    target = Placement.of(body.placement)
    snap = snapshot.build(session, now)
    result = scheduling.PassResult()
    decision = Resize(job_id, target)
    try:
        scheduling.ledger_for(snap).apply([decision], snap.jobs)
    except InvalidDecision as exc:
        raise BadRequest(f"cannot move job {job_id} to {target}: {exc}") from None
    try:
        scheduling.resize(session, job, target, now, result, snap.holders)
        session.commit()
    except (IntegrityError, StaleState) as exc:
        session.rollback()
        raise Conflict(f"job {job_id} changed while moving it ({exc}); try again") from None
    if result.skipped:
        raise BadRequest("; ".join(result.skipped))
    changes = Changes(scheduler=True, jobs={job_id}, nodes=result.nodes)
    return jobs.show(session, job_id, default_policy, now), changes
