"""Jobs page data: one page of the job list, and why each of its jobs is where it is.

Owns what the page's REASON line says under each job's state: why a
pending job waits (`queue.reasons_of`, the same words as `schedulearn show`
and the Queue page, from one read of the queue for the whole page) and how
an ended job ended (its message, shown only to those who may see its
details, as the API shows it). A running job has no reason line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlmodel import Session

from schedulearn.protocol import JobList, JobPublic, JobState
from schedulearn.server.auth import Caller
from schedulearn.server.services import jobs as job_service
from schedulearn.server.services import queue as queue_service


@dataclass(slots=True)
class JobsPage:
    listing: JobList
    # Why each pending job of the page waits, by id.
    waits: dict[int, str] = field(default_factory=dict)

    def reason(self, job: JobPublic) -> str | None:
        """The line under a job's state: why it waits, or how it ended."""
        if job.state is JobState.PENDING:
            return self.waits.get(job.id)
        if job.state.is_final:
            return job.message or None
        return None


def jobs_page(
    session: Session,
    caller: Caller,
    states: list[JobState],
    user: str | None,
    name: str | None,
    offset: int,
    limit: int,
    default_policy: str,
    now: float,
) -> JobsPage:
    """The page's jobs as `caller` may see them, newest first, with their reasons."""
    listing = job_service.list_jobs(session, caller, states, user, name, offset, limit, True)
    pending = {j.id for j in listing.items if j.state is JobState.PENDING}
    waits = queue_service.reasons_of(session, pending, default_policy, now) if pending else {}
    return JobsPage(listing, waits)
