"""What the web does to several jobs at once, or to a job again: cancel a
selection, and the spec that resubmits a job.

Owns nothing. Each job of a selection is cancelled by `jobs.cancel`, the
API's own rule (a user cancels only their own jobs, an admin any), and a
refusal for one job is that job's outcome, never the others'. The spec of
a resubmission is `protocol.spec_again` of the job as the caller may see it
(`jobs.show_to`), as `schedulearn resubmit` builds it from the API's reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlmodel import Session

from schedulearn.protocol import JobSpec, JobState, spec_again
from schedulearn.server.auth import Caller
from schedulearn.server.errors import BadRequest, Forbidden, ServiceError
from schedulearn.server.services import jobs
from schedulearn.server.wakeups import Changes

# The most jobs one request may name (a page of the Jobs list is 25).
MOST_SELECTED = 1000


@dataclass(frozen=True, slots=True)
class Cancelled:
    """What became of one selected job: its state now, or why it was refused."""

    job_id: int
    state: JobState | None
    refused: str | None = None


def cancel_selected(
    session: Session, job_ids: Sequence[int], caller: Caller, now: float
) -> tuple[list[Cancelled], Changes]:
    """Cancel each of `job_ids` as `caller` may (`jobs.cancel`); one outcome per id, in order."""
    if len(job_ids) > MOST_SELECTED:
        raise BadRequest(f"{len(job_ids)} jobs selected; cancel at most {MOST_SELECTED} at once")
    outcomes: list[Cancelled] = []
    changes = Changes()
    for job_id in dict.fromkeys(job_ids):
        try:
            public, changed = jobs.cancel(session, job_id, caller, now)
        except ServiceError as exc:
            session.rollback()
            outcomes.append(Cancelled(job_id, None, exc.message))
            continue
        changes.merge(changed)
        outcomes.append(Cancelled(job_id, public.state))
    return outcomes, changes


@dataclass(frozen=True, slots=True)
class Again:
    """A job's spec to submit again, and the keys of its secret env it cannot carry."""

    spec: JobSpec
    secret_keys: list[str]


def resubmission(
    session: Session, job_id: int, caller: Caller, default_policy: str, now: float
) -> Again:
    """The spec that submits job `job_id` again for `caller`: only a job whose spec
    the caller may see (its owner's, or any for an admin)."""
    job = jobs.show_to(session, job_id, caller, default_policy, now)
    if job.details_hidden or job.command is None:
        raise Forbidden(f"job {job_id} belongs to {job.user}; you may resubmit only your own jobs")
    return Again(spec_again(job), list(job.secret_env_keys or ()))
