"""Job dependencies, live: what became of the jobs a waiting job names, read
out of the database for `core.dependencies` (which holds the rule), and the
cancellation of jobs whose dependency can never be met.

Owns no state. `outcomes` fills `ClusterView.outcomes` for the scheduler's
pass and for `show`; `check_named` refuses a submission naming a job that
does not exist; `settle` (each scheduling pass) cancels the waiting jobs the
core calls doomed, with its reason as the job's message.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from sqlalchemy import bindparam, or_, select
from sqlmodel import Session, col

from schedulearn.core import dependencies
from schedulearn.core.dependencies import Outcome
from schedulearn.protocol import JobState
from schedulearn.server.errors import BadRequest
from schedulearn.server.models import Job
from schedulearn.server.services import lifecycle
from schedulearn.server.states import StaleState

log = logging.getLogger(__name__)

_NAMED = select(col(Job.id), col(Job.array_id), col(Job.state)).where(
    or_(
        col(Job.id).in_(bindparam("ids", expanding=True)),
        col(Job.array_id).in_(bindparam("ids", expanding=True)),
    )
)
_WAITING = select(col(Job.id), col(Job.dependency)).where(
    col(Job.state) == JobState.PENDING, col(Job.dependency).is_not(None)
)


def outcomes(session: Session, ids: Iterable[int]) -> dict[int, Outcome]:
    """Each of `ids` that exists: a job, or every task of the array with that id."""
    wanted = sorted(set(ids))
    tasks: dict[int, list[JobState]] = defaultdict(list)
    arrays: set[int] = set()
    # In chunks: a database takes only so many parameters in one statement.
    for start in range(0, len(wanted), 500):
        chunk = set(wanted[start : start + 500])
        for job_id, array_id, state in session.connection().execute(_NAMED, {"ids": sorted(chunk)}):
            # An array's id is its first task's: that id names the whole array;
            # another task's id names that task alone.
            if array_id is not None and array_id in chunk:
                tasks[array_id].append(JobState(state))
                arrays.add(array_id)
            if job_id in chunk and job_id != array_id:
                tasks[job_id].append(JobState(state))
    return {
        i: Outcome(
            tasks=len(states),
            ended=sum(s.is_final for s in states),
            succeeded=sum(s is JobState.SUCCEEDED for s in states),
            array=i in arrays,
        )
        for i, states in tasks.items()
    }


def check_named(session: Session, text: str | None) -> None:
    """Refuse a dependency that names a job that does not exist."""
    ids = dependencies.named(text)
    missing = sorted(set(ids) - set(outcomes(session, ids)))
    if missing:
        names = ", ".join(str(i) for i in missing)
        raise BadRequest(
            f"--dependency names job {names}, which does not exist; "
            "name jobs by the ids `schedulearn jobs` lists"
        )


def settle(session: Session, now: float) -> int:
    """Cancel every waiting job whose dependency can never be met (and then
    those waiting on them, and so on); returns how many, committed."""
    cancelled = 0
    while True:
        waiting = list(session.connection().execute(_WAITING))
        if not waiting:
            return cancelled
        known = outcomes(session, (i for _, text in waiting for i in dependencies.named(text)))
        doomed = {}
        for job_id, text in waiting:
            verdict = dependencies.verdict(text, known)
            if verdict.never:
                doomed[job_id] = verdict.reason
        if not doomed:
            return cancelled
        try:
            for job in session.execute(select(Job).where(col(Job.id).in_(doomed))).scalars():
                lifecycle.cancel(session, job, now, "the scheduler", why=doomed[job.id or 0])
            session.commit()
        except StaleState as exc:
            # A user cancelled or released one meanwhile: the next pass looks again.
            session.rollback()
            log.info("dependency cancellations put off: %s", exc)
            return cancelled
        cancelled += len(doomed)
