"""Jobs as users see them: submit, list, show (with why it waits), cancel.

Owns the rules of acceptance: a submission is checked against the known
nodes (refused with what to change when no node could ever run it) and
committed before the reply, job arrays included.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlmodel import Session, col

from schedulearn.core import JobView, NodeView, timelimits
from schedulearn.core.views import Role, declared
from schedulearn.protocol import (
    Executor,
    JobHistory,
    JobList,
    JobPublic,
    JobSpec,
    JobState,
    JobUpdate,
    TransitionPublic,
)
from schedulearn.server import bulk
from schedulearn.server.auth import Caller
from schedulearn.server.declared import Codec
from schedulearn.server.errors import BadRequest, Conflict, Forbidden, NotFound, Unservable
from schedulearn.server.models import Job, JobTransition
from schedulearn.server.services import (
    checkpoints,
    dependencies,
    job_listing,
    lifecycle,
    progress,
    queue,
    queues,
    snapshot,
    users,
    visibility,
)
from schedulearn.server.services.waiting import never_servable
from schedulearn.server.wakeups import Changes

_JOB_COLUMNS = frozenset(Job.__table__.columns.keys())
# Public fields read from the row of the same name; the others are computed.
_SHOWN = tuple(n for n in JobPublic.model_fields if n in _JOB_COLUMNS and n != "progress")


def _on_spec(name: str) -> bool:
    # A spec gives a stored field as a field, or as a property that
    # normalises its wire form (`memory_gb` from `memory`).
    return name in JobSpec.model_fields or isinstance(getattr(JobSpec, name, None), property)


# Spec fields stored in the column of the same name; `_normalised` then
# overrides those whose wire form differs from the stored one.
_VIEW_SUBMITTED = declared(JobView, Role.SUBMITTED)
_SUBMITTED = tuple(
    n
    for n in dict.fromkeys((*JobSpec.model_fields, *_VIEW_SUBMITTED))
    if n in _JOB_COLUMNS and _on_spec(n)
)
_CODEC = Codec(JobView, _VIEW_SUBMITTED)


def to_public(job: Job, position: int | None = None, reason: str | None = None) -> JobPublic:
    """The row as its owner sees it: every public field from its column, by name.

    Callers other than the owner get it through `visibility.public_view`.
    """
    values = {n: getattr(job, n) for n in _SHOWN}
    values["id"] = job.id or 0
    return JobPublic(
        **values,
        queue_position=position,
        waiting_reason=reason,
        progress=progress.latest(job),
        # The keys only: a secret's value never leaves the server but to an agent.
        secret_env_keys=sorted(job.secret_env or {}),
    )


def _normalised(spec: JobSpec) -> dict[str, Any]:
    """The submitted fields as stored: by name, in the stored form."""
    # The fields whose wire form differs from the stored one.
    spelled = dict(
        gpus=spec.requested_gpus,
        gpu_type=spec.gpu_type or None,
        deadline=spec.deadline_epoch,
        estimated_duration=spec.estimated_seconds,
        time_limit=spec.time_limit_seconds,
        env=dict(spec.env),
        secret_env=dict(spec.secret_env) or None,
        launcher=spec.launcher.value,
        # A list of checked labels on the wire; one named twice counts once.
        constraints=list(dict.fromkeys(spec.constraints)),
    )
    values = {n: _CODEC.dump(n, getattr(spec, n)) for n in _SUBMITTED if n not in spelled}
    values.update(spelled)
    return values


_COLUMNS = [c.name for c in Job.__table__.columns if c.name != "id"]
_INSERT_JOB = Job.__table__.insert()
# Each column's default as the model gives it (a factory is called per row).
_DEFAULTS = {n: f for n, f in Job.model_fields.items() if n in _COLUMNS and not f.is_required()}


def _row(spec: JobSpec, user: str, now: float, stored: dict[str, Any]) -> dict[str, Any]:
    """A new job's row, every column by name: what `Job(...)` would hold, without
    building the ORM object (a third of a submission's cost). `stored` is
    `_normalised(spec)`, taken over."""
    given = stored
    given.update(
        user=user,
        state=JobState.PENDING,
        executor=(Executor.DOCKER if spec.image else Executor.SUBPROCESS).value,
        submitted_at=now,
        queued_at=now,
    )
    return {
        c: given[c] if c in given else _DEFAULTS[c].get_default(call_default_factory=True)
        for c in _COLUMNS
    }


def _public_of(row: dict[str, Any]) -> JobPublic:
    """`to_public` of a row just inserted (no progress, not yet placed in the queue)."""
    return JobPublic(
        **{n: row[n] for n in _SHOWN},  # the id among them
        queue_position=None,
        waiting_reason=None,
        progress=None,
        secret_env_keys=sorted(row["secret_env"] or {}),
    )


@dataclass(frozen=True, slots=True)
class Submitted:
    """A submission's jobs as their owner sees them, and what to wake."""

    jobs: list[JobPublic]
    changes: Changes


def _probe(stored: dict[str, Any]) -> JobView:
    """The job as the scheduler will see it once queued (every submitted field),
    from its `_normalised` spec."""
    values = {n: stored[n] for n in _VIEW_SUBMITTED}
    for name in _CODEC.json_fields:
        values[name] = _CODEC.loader(name)(values[name])
    return JobView(id=0, submitted_at=0.0, **values)


def check_servable(
    stored: dict[str, Any], nodes: tuple[NodeView, ...], members: queues.Membership | None = None
) -> None:
    """Refuse a job (its `_normalised` spec) that no node could ever run, or that
    its queue could never start (`members`: the declared queues)."""
    probe = _probe(stored)
    why = never_servable(probe, nodes)
    if why:
        raise Unservable(f"this job can never run here: {why}")
    why = members.never_starts(probe, nodes) if members is not None else None
    if why:
        raise Unservable(f"this job can never start under the current queues: {why}")


def submit(
    session: Session,
    specs: list[tuple[JobSpec, Caller]],
    now: float,
    shape: snapshot.ShapeCache | None = None,
    before_commit: Callable[[list[Submitted | Exception]], None] | None = None,
) -> list[Submitted | Exception]:
    """Accept a batch of submissions in one transaction (one commit for all).

    Each entry gets its jobs or the error that refused it; a refused
    entry does not affect the others. Rows go in with one multi-row
    INSERT ... RETURNING, not through the ORM: this is the hot path.
    """
    nodes = (shape or snapshot.ShapeCache()).get(session)
    members = queues.membership(session)
    results: list[Submitted | Exception] = []
    batches: list[list[dict[str, Any]]] = []
    starts: list[int] = []  # each batch's first array index
    for spec, caller in specs:
        try:
            users.check_priority(spec.priority, caller)
            spec = members.admit(spec, caller)  # its queue: named, the owner's default
            stored = _normalised(spec)  # once, for the check and the row
            check_servable(stored, nodes, members)
            if spec.dependency:
                dependencies.check_named(session, spec.dependency)
        except (BadRequest, Forbidden, Unservable) as exc:
            results.append(exc)
            batches.append([])
            starts.append(0)
            continue
        row = _row(spec, caller.user, now, stored)
        # The copies of an array share no mutable value (env, command lists).
        batches.append([row, *(copy.deepcopy(row) for _ in range(spec.count - 1))])
        starts.append(spec.array_start)
        results.append(Submitted([], Changes(scheduler=True)))
    flat = [row for rows in batches for row in rows]
    if flat:
        ids = bulk.insert_ids(session.connection(), _INSERT_JOB, flat)
        for row, job_id in zip(flat, ids, strict=True):
            row["id"] = job_id
        # An array: several tasks, or one task given an index or a limit.
        arrays = [
            (rows, start)
            for rows, start in zip(batches, starts, strict=True)
            if len(rows) > 1 or (rows and (start or rows[0].get("array_limit")))
        ]
        for rows, start in arrays:
            first, size = rows[0]["id"], len(rows)
            for i, row in enumerate(rows):
                row["array_id"], row["array_index"], row["array_size"] = first, start + i, size
            # Ids of one INSERT need not be consecutive (PostgreSQL sequences
            # interleave under concurrency), so each row gets its index.
            session.execute(
                update(Job.__table__)
                .where(Job.__table__.c.id == bindparam("jid"))
                .values(
                    array_id=bindparam("aid"),
                    array_index=bindparam("aix"),
                    array_size=bindparam("asz"),
                ),
                [
                    {"jid": r["id"], "aid": first, "aix": start + i, "asz": size}
                    for i, r in enumerate(rows)
                ],
            )
    for result, rows in zip(results, batches, strict=True):
        if isinstance(result, Submitted):
            result.jobs.extend(_public_of(row) for row in rows)
    if before_commit is not None:
        before_commit(results)  # in the same transaction (idempotency keys)
    session.commit()
    return results


def list_jobs(
    session: Session,
    caller: Caller,
    states: list[JobState],
    user: str | None,
    name: str | None,
    offset: int,
    limit: int,
    newest_first: bool,
    array: int | None = None,
) -> JobList:
    where = job_listing.Filter(states, user, name, array)
    rows, total = job_listing.page(session, where, offset, limit, newest_first)
    items = [visibility.public_view(to_public(r), caller) for r in rows]
    return JobList(items=items, total=total, offset=offset, limit=limit)


def _get(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}; list jobs with `schedulearn jobs`")
    return job


def show(session: Session, job_id: int, default_policy: str, now: float) -> JobPublic:
    """One job in full; a pending one with its place in the policy's order and why it
    waits (for its owner, an admin, or the server itself)."""
    job = _get(session, job_id)
    if job.state != JobState.PENDING:
        public = to_public(job)
        if job.state == JobState.RUNNING and job.time_limit is not None:
            public.time_left = timelimits.time_left(snapshot.job_view(job), now)
    else:
        position, reason = queue.place_of(session, job, default_policy, now)
        public = to_public(job, position, reason)
    public.checkpoint = checkpoints.current(session, job_id)
    return public


def show_to(
    session: Session, job_id: int, caller: Caller, default_policy: str, now: float
) -> JobPublic:
    """One job as `caller` may see it (`visibility.public_view`)."""
    return visibility.public_view(show(session, job_id, default_policy, now), caller)


def cancel(session: Session, job_id: int, caller: Caller, now: float) -> tuple[JobPublic, Changes]:
    job = _get(session, job_id)
    if not caller.is_admin and job.user != caller.user:
        raise Forbidden(f"job {job_id} belongs to {job.user}; you may cancel only your own jobs")
    if job.state.is_final:
        return to_public(job), Changes()
    changes = lifecycle.cancel(session, job, now, caller.user)
    session.commit()
    return to_public(job), changes


def history(session: Session, job_id: int, caller: Caller) -> JobHistory:
    """The job's state changes, as `caller` may see them (`visibility.public_history`)."""
    owner = _get(session, job_id).user
    rows = session.execute(
        select(JobTransition)
        .where(col(JobTransition.job_id) == job_id)
        .order_by(col(JobTransition.id))
    ).scalars()
    full = JobHistory(
        job_id=job_id,
        transitions=[
            TransitionPublic(
                at=r.at,
                from_state=r.from_state,
                to_state=r.to_state,
                attempt=r.attempt,
                message=r.message,
            )
            for r in rows
        ],
    )
    return visibility.public_history(full, owner, caller)


def _own(job: Job, caller: Caller, what: str) -> None:
    if not caller.is_admin and job.user != caller.user:
        raise Forbidden(f"job {job.id} belongs to {job.user}; you may {what} only your own jobs")


def _touch(job: Job) -> None:
    """Make the scheduler read a pending job's view again. It rebuilds a cached
    view when `queued_at` changes (`snapshot.PendingCache`); the smallest step
    up keeps the job's place in the queue."""
    job.queued_at = math.nextafter(job.queued_at, math.inf)


def set_held(
    session: Session, job_id: int, caller: Caller, held: bool
) -> tuple[JobPublic, Changes]:
    """Hold a pending job (it keeps its place but does not start) or release it."""
    job = _get(session, job_id)
    _own(job, caller, "hold and release")
    if job.state != JobState.PENDING:
        verb = "held" if held else "released"
        raise Conflict(
            f"job {job_id} is {job.state.value}; only a pending job can be {verb}"
            + ("; cancel it instead" if held and not job.state.is_final else "")
        )
    if job.held != held:
        job.held = held
        _touch(job)
    session.commit()
    return to_public(job), Changes(scheduler=not held)


def update_job(
    session: Session, job_id: int, caller: Caller, changes: JobUpdate
) -> tuple[JobPublic, Changes]:
    """Change what may change after submission (the priority), within the caller's range."""
    job = _get(session, job_id)
    _own(job, caller, "update")
    if job.state.is_final:
        raise Conflict(f"job {job_id} has ended ({job.state.value}); nothing to update")
    if changes.priority is not None:
        users.check_priority(changes.priority, caller)
        job.priority = changes.priority
        if job.state == JobState.PENDING:
            _touch(job)
    session.commit()
    return to_public(job), Changes(scheduler=True)
