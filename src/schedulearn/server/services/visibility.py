"""Who may see what of a job: the one rule the API, the CLI and the web pages follow.

Everyone signed in sees the queue and the cluster, as `squeue` shows it to
every user of a Slurm cluster: a job's id, name, owner, state, size (GPUs,
CPUs, memory, GPU type), image, priority, deadline and estimate, placement,
why it waits, its times, restarts, exit code and predictions. These are what
a user needs to understand why their own job waits, and what a policy
decides on.

A job's *details* are for its owner and admins only (`may_see_details`):
its command, environment, working directory, free-text message (start
errors quote the program and the workdir), logs, checkpoint, progress
reports and the keys of its secret environment. To anyone else
`public_view` returns the job with those fields null and
`details_hidden=True`, so a client can say "hidden" rather than show an
empty value; `require_details` refuses (403) a route that is all detail
(logs, progress history).

Choices: the *name* is shown (as `squeue` does; users label jobs
for others to read), and so is the *image*: it decides which nodes can
run the job (a container engine), so it is scheduling information. Users
who need to keep a name or image private must not put secrets in them;
secrets go in `secret_env`.

`secret_env` values are shown to nobody, owner and admins included: no
reply model has a field for them (`JobPublic.secret_env_keys` lists the
keys). They reach only the agent, in its `Assignment`.

Owns no state; it decides from the caller and the job's owner alone.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlmodel import Session, col

from schedulearn.protocol import JobHistory, JobPublic
from schedulearn.server.auth import Caller
from schedulearn.server.errors import Forbidden, NotFound
from schedulearn.server.models import Job

# The `JobPublic` fields only the owner and admins see (null to anyone else).
DETAILS: tuple[str, ...] = (
    "command",
    "env",
    "workdir",
    "message",
    "progress",
    "checkpoint",
    "secret_env_keys",
)
_HIDDEN = {name: None for name in DETAILS} | {"details_hidden": True}


def may_see_details(caller: Caller, job_owner: str) -> bool:
    """Whether `caller` may see the details of a job owned by `job_owner`."""
    return caller.is_admin or caller.user == job_owner


def public_view(job: JobPublic, caller: Caller) -> JobPublic:
    """`job` as `caller` may see it: whole, or with its details null and flagged."""
    if may_see_details(caller, job.user):
        return job
    return job.model_copy(update=_HIDDEN)


def public_views(jobs: list[JobPublic], caller: Caller) -> list[JobPublic]:
    return [public_view(j, caller) for j in jobs]


def public_history(history: JobHistory, owner: str, caller: Caller) -> JobHistory:
    """A job's state changes; their messages are details (they quote start errors)."""
    if may_see_details(caller, owner):
        return history
    blank = [t.model_copy(update={"message": ""}) for t in history.transitions]
    return history.model_copy(update={"transitions": blank, "details_hidden": True})


def hidden_note(job_id: int, owner: str) -> str:
    """The words clients show where a detail is hidden."""
    return f"job {job_id} belongs to {owner}; only its owner and admins see its details"


def owner_of(session: Session, job_id: int) -> str:
    """The user a job belongs to (NotFound for an unknown job)."""
    owner = session.execute(select(col(Job.user)).where(col(Job.id) == job_id)).scalar_one_or_none()
    if owner is None:
        raise NotFound(f"no job {job_id}; list jobs with `schedulearn jobs`")
    return str(owner)


def require_details(session: Session, job_id: int, caller: Caller, what: str) -> None:
    """Refuse (403) to show `what` ("logs", "progress") of a job that is not the caller's."""
    owner = owner_of(session, job_id)
    if not may_see_details(caller, owner):
        raise Forbidden(f"the {what} of job {job_id} are hidden: {hidden_note(job_id, owner)}")
