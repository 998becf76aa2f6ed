"""Tenant queues for the admin and the Queues page: add, change, remove, list, history.

Writes the tables `tenant_queue` and `queue_member` (a queue's guarantee,
limit, weight, parent, members and who takes it as their default); checks
a queue with the core's rules before it is stored (`core_queue`, and the
tree the queues would make together: `Tenancy`, 422 with the core's
message) and refuses to remove one that still has live jobs or children. The views (`list_queues`,
`get`, `history`) read each queue's use and share from `queues.book` and
the samples the scheduler records (`queues.observe`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from sqlalchemy import delete, func, select
from sqlmodel import Session, col

from schedulearn.core.fairshare_queues import QueueShare, Tenancy, best_effort
from schedulearn.protocol import (
    JobState,
    QueueCreate,
    QueueHistory,
    QueueList,
    QueuePublic,
    QueueRemoved,
    QueueSamplePublic,
    QueueUpdate,
)
from schedulearn.server.errors import BadRequest, Conflict, NotFound, Unkeepable
from schedulearn.server.models import Job, QueueMember, QueueSample, TenantQueue
from schedulearn.server.services import queue_promises
from schedulearn.server.services.queues import Book, book, core_queue, job_queue_column

# A queue with jobs in these states cannot be removed.
_LIVE = (JobState.PENDING, JobState.ASSIGNED, JobState.RUNNING, JobState.PREEMPTING)


def _check(session: Session, row: TenantQueue) -> None:
    """Refuse `row` (new or changed) when the core would: the queue alone (400),
    then the tree it makes with the stored queues (422: each part is valid, the
    whole cannot be kept; the core's message says what to change)."""
    try:
        mine = core_queue(row)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    # Every queue row locked (PostgreSQL; SQLite writes one at a time) in one
    # order, before this change is flushed: two admins adding children to one
    # parent at once are checked one after the other, never both against the
    # tree without the other's child (a stored tree the core refuses would stop
    # every scheduling pass).
    with session.no_autoflush:
        stored = session.execute(
            select(TenantQueue).order_by(col(TenantQueue.name)).with_for_update()
        ).scalars()
        others = [core_queue(r) for r in stored if r.name != row.name]
    try:
        Tenancy((*others, mine))
    except ValueError as exc:
        raise Unkeepable(str(exc)) from None


def _set_members(
    session: Session, name: str, add: Iterable[str], remove: Iterable[str], default: Iterable[str]
) -> None:
    current = {
        m.user: m
        for m in session.execute(
            select(QueueMember).where(col(QueueMember.queue) == name)
        ).scalars()
    }
    for user in remove:
        if user in current:
            session.delete(current.pop(user))
    default = list(default)
    for user in [*add, *default]:
        if user not in current:
            current[user] = QueueMember(queue=name, user=user)
            session.add(current[user])
    if default:
        # A user has one default queue: this one replaces any other.
        for other in session.execute(
            select(QueueMember).where(
                col(QueueMember.user).in_(default),
                col(QueueMember.queue) != name,
                col(QueueMember.is_default),
            )
        ).scalars():
            other.is_default = False
            session.add(other)
        for user in default:
            current[user].is_default = True


def add(session: Session, body: QueueCreate, now: float) -> QueuePublic:
    if session.get(TenantQueue, body.name) is not None:
        raise Conflict(f"queue {body.name} exists; change it with `schedulearn queue set`")
    row = TenantQueue(
        name=body.name,
        guaranteed=dict(body.guaranteed),
        gpu_limit=body.limit,
        weight=body.weight,
        created_at=now,
        parent=body.parent,
    )
    _check(session, row)
    queue_promises.check(session, row, queue_promises.promised(session), body.overcommit)
    session.add(row)
    _set_members(session, body.name, body.users, (), body.default_for)
    session.commit()
    return get(session, body.name, now)


def update(session: Session, name: str, body: QueueUpdate, now: float) -> QueuePublic:
    row = _row(session, name)
    before = queue_promises.promised(session)
    if body.guaranteed is not None:
        row.guaranteed = dict(body.guaranteed)
    if body.clear_limit:
        row.gpu_limit = None
    elif body.limit is not None:
        row.gpu_limit = body.limit
    if body.weight is not None:
        row.weight = body.weight
    if body.clear_parent:
        row.parent = None
    elif body.parent is not None:
        row.parent = body.parent
    _check(session, row)
    queue_promises.check(session, row, before, body.overcommit)
    session.add(row)
    _set_members(session, name, body.add_users, body.remove_users, body.default_for)
    session.commit()
    return get(session, name, now)


def remove(session: Session, name: str) -> QueueRemoved:
    row = _row(session, name)
    live = session.execute(
        select(func.count())
        .select_from(Job)
        .where(job_queue_column == name, col(Job.state).in_(_LIVE))
    ).scalar_one()
    if live:
        raise Conflict(
            f"queue {name} has {live} pending or running jobs; cancel them or let them end first"
        )
    children = session.execute(
        select(col(TenantQueue.name))
        .where(col(TenantQueue.parent) == name)
        .order_by(col(TenantQueue.name))
    ).scalars()
    kids = list(children)
    if kids:
        raise Conflict(
            f"queue {name} is the parent of {', '.join(kids)}; remove them or give them "
            f"another parent first (`schedulearn queue set {kids[0]} --no-parent`)"
        )
    session.delete(row)
    session.execute(delete(QueueMember).where(col(QueueMember.queue) == name))
    session.commit()
    return QueueRemoved(name=name)


def _row(session: Session, name: str) -> TenantQueue:
    row = session.get(TenantQueue, name)
    if row is None:
        raise NotFound(f"no queue {name}; list them with `schedulearn queue list`")
    return row


def _public(current: Book, name: str, members: Mapping[str, list[QueueMember]]) -> QueuePublic:
    s = current.shares.get(name) or QueueShare(best_effort(name))
    row = current.rows.get(name)
    mine = members.get(name, [])
    jobs, gpus = current.waiting.get(name, (0, 0))
    return QueuePublic(
        name=name,
        guaranteed=dict(s.queue.guaranteed),
        limit=s.queue.limit,
        weight=s.queue.weight,
        parent=s.queue.parent,
        guaranteed_gpus=s.guaranteed,
        users=sorted(m.user for m in mine),
        default_for=sorted(m.user for m in mine if m.is_default),
        used=s.used,
        pending_jobs=jobs,
        pending_gpus=gpus,
        share=round(s.share, 3),
        declared=row is not None,
        created_at=row.created_at if row is not None else 0.0,
    )


def _members(session: Session) -> dict[str, list[QueueMember]]:
    out: dict[str, list[QueueMember]] = defaultdict(list)
    for m in session.execute(select(QueueMember)).scalars():
        out[m.queue].append(m)
    return out


def list_queues(session: Session, now: float) -> QueueList:
    """Every declared queue, and any undeclared one that has jobs (best-effort)."""
    current, members = book(session, now), _members(session)
    promised = queue_promises.promised(session)
    return QueueList(
        items=[_public(current, n, members) for n in current.shares],
        promised=promised.total,
        cluster_gpus=promised.cluster,
    )


def get(session: Session, name: str, now: float) -> QueuePublic:
    current = book(session, now)
    if name not in current.shares:
        _row(session, name)
    return _public(current, name, _members(session))


def history(session: Session, since: float) -> QueueHistory:
    """Every sample since `since`, oldest first."""
    rows = session.execute(
        select(QueueSample)
        .where(col(QueueSample.at) >= since)
        .order_by(col(QueueSample.at), col(QueueSample.id))
    ).scalars()
    samples = [
        QueueSamplePublic(
            at=r.at, queue=r.queue, used=r.used, guaranteed=r.guaranteed, share=r.share
        )
        for r in rows
    ]
    return QueueHistory(since=since, samples=samples)
