"""Wall-clock limits, live: each scheduler round stops the running jobs that
have used up their `--time` (the rule is `core.timelimits`), ending them
`timeout` with the reason; the agents then stop their runs as for a cancel
(SIGTERM, the grace period, SIGKILL). A waiting job whose earlier runs used
its time up (requeued after a preemption) ends `timeout` without starting.
Owns no state.
"""

from __future__ import annotations

import logging

from sqlalchemy import and_, or_, select
from sqlmodel import Session, col

from schedulearn.core import timelimits
from schedulearn.protocol import JobState
from schedulearn.server.models import Job
from schedulearn.server.services import lifecycle, snapshot
from schedulearn.server.states import StaleState
from schedulearn.server.wakeups import Changes

log = logging.getLogger(__name__)

_STATES = (JobState.RUNNING, JobState.PENDING)
# Every round: running jobs with a limit, and only those waiting jobs whose
# earlier runs used theirs up (a long queue of limited jobs is not read).
# Both states through the partial index `ix_job_limited` (jobs with a limit).
_LIMITED = select(*snapshot.JOBS.columns).where(
    col(Job.time_limit).is_not(None),
    col(Job.state).in_(_STATES),
    or_(
        col(Job.state) == JobState.RUNNING,
        and_(col(Job.state) == JobState.PENDING, col(Job.service_seconds) >= col(Job.time_limit)),
    ),
)


def enforce(session: Session, now: float) -> Changes:
    """End every running or waiting job past its limit (committed); what changed."""
    changes = Changes()
    views = [snapshot.JOBS.from_row(r) for r in session.connection().execute(_LIMITED)]
    over = timelimits.expired(views, now)
    if not over:
        return changes
    try:
        for view in over:
            job = session.get(Job, view.id)
            if job is not None and job.state in _STATES:
                changes = changes.merge(
                    lifecycle.time_out(session, job, now, timelimits.expired_reason(view))
                )
        session.commit()
    except StaleState as exc:
        # It ended or was cancelled meanwhile: the next round looks again.
        session.rollback()
        log.info("time limits put off: %s", exc)
        return Changes()
    log.info("stopped at their time limits: %s", [v.id for v in over])
    return changes
