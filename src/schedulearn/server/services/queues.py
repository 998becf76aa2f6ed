"""Tenant queues, live: what the scheduler and a submission read of them.

Owns the tables `queue_usage` and `queue_sample`, and reads
`tenant_queue` and `queue_member` (`queue_admin` changes those and
answers the admin's and the Queues page's questions). The rules
themselves are the core's (`core.fairshare_queues`: guarantees, limits,
weights, usage decay, fair share; `core.fairshare.FairShare` decides):
this module turns the rows into a `Tenancy` for the scheduler's snapshot
(`tenancy`), keeps the decayed usage the core reads (`observe`, once per
scheduler round: the live `UsageMeter`, settled on read), computes each
queue's use and share now (`book`), and resolves a submission's queue
(`membership`).

A job that names no queue goes to its owner's default queue, else to
`DEFAULT_QUEUE` ("default"), which is best-effort unless declared. A
queue with members takes jobs only from them (and admins); one without
members is open to everyone. With no queue declared at all the
scheduler gets no tenancy and runs the policy in force alone.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, delete, func, select
from sqlmodel import Session, col

from schedulearn.core.fairshare_queues import (
    DEFAULT_QUEUE,
    Queue,
    QueueShare,
    Tenancy,
    best_effort,
    fill,
    fits_guarantee,
    owed_rate,
    own_guarantee,
)
from schedulearn.core.fairshare_reasons import never_starts
from schedulearn.core.views import JobView, NodeView
from schedulearn.protocol import (
    JobSpec,
    JobState,
)
from schedulearn.server.auth import Caller
from schedulearn.server.errors import BadRequest, Forbidden
from schedulearn.server.models import (
    Allocation,
    Gpu,
    Job,
    Node,
    QueueMember,
    QueueSample,
    QueueUsage,
    TenantQueue,
)

# A sample is written when a queue's GPUs in use change, and at least this
# often while they do not (so the chart's last point is recent).
RESAMPLE_SECONDS = 300.0
# Samples older than this are deleted.
KEEP_SAMPLES_SECONDS = 30 * 24 * 3600.0


# `job.queue`, a declared column (core.views.JobView.queue).
job_queue_column: ColumnElement[str] = Job.__table__.c.queue


def _key(queue: str) -> str:
    return queue or DEFAULT_QUEUE


def core_queue(row: TenantQueue) -> Queue:
    """The row as the core's `Queue` (which checks it: limit >= guarantee, weight > 0;
    the tree it makes with the others is checked by `Tenancy`)."""
    return _core(row.name, row.guaranteed, row.gpu_limit, row.weight, row.parent)


def _core(
    name: str, guaranteed: Any, limit: int | None, weight: float, parent: str | None
) -> Queue:
    gpus = {str(t): int(n) for t, n in (guaranteed or {}).items() if int(n) > 0}
    return Queue(name, gpus, limit, weight, parent or None)


def settle(usage: float, busy: int, seconds: float, half_life: float) -> float:
    """Decayed GPU-seconds after holding `busy` GPUs for `seconds` more
    (`core.fairshare_queues.UsageMeter`'s integral, one step)."""
    if seconds <= 0:
        return usage
    rate = math.log(2) / half_life
    keep = math.exp(-rate * seconds)
    return usage * keep + busy * (1.0 - keep) / rate


# --- the scheduler's side ----------------------------------------------------------


def _usage(
    session: Session, now: float
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Every queue's decayed usage as of `now`, its served part (`Tenancy.served`)
    and what it was owed (`Tenancy.owed`)."""
    usage: dict[str, float] = {}
    served: dict[str, float] = {}
    owed: dict[str, float] = {}
    for r in session.execute(select(QueueUsage)).scalars():
        usage[r.queue] = settle(r.usage, r.busy, now - r.at, r.half_life)
        served[r.queue] = settle(r.served, r.serving, now - r.at, r.half_life)
        owed[r.queue] = settle(r.owed, r.owing, now - r.at, r.half_life)
    return usage, served, owed


def tenancy(session: Session, now: float) -> Tenancy | None:
    """The declared queues and their decayed usage as of `now`; None when none is declared."""
    if not declared(session):  # a plain read first: every pass asks, and most clusters have none
        return None
    rows = session.execute(select(TenantQueue)).scalars().all()
    usage, served, owed = _usage(session, now)
    queues = tuple(core_queue(r) for r in rows)
    half_life = session.execute(select(func.max(col(QueueUsage.half_life)))).scalar()
    if half_life is None:
        return Tenancy(queues, usage, served=served, owed=owed)
    return Tenancy(queues, usage, half_life, served, owed)


def _held(session: Session) -> dict[str, tuple[int, int]]:
    """GPUs held now per queue: (all, by non-preemptible jobs)."""
    held: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for queue, preemptible, n in session.execute(
        select(job_queue_column, col(Job.preemptible), func.count())
        .select_from(Allocation)
        .join(Job, col(Allocation.job_id) == col(Job.id))
        .group_by(job_queue_column, col(Job.preemptible))
    ):
        held[_key(queue)][0] += n
        if not preemptible:
            held[_key(queue)][1] += n
    return {q: (a, b) for q, (a, b) in held.items()}


def _serving(session: Session) -> tuple[dict[str, int], dict[str, int]]:
    """Per queue: GPUs held now by its jobs that fit its own guarantee
    (`fits_guarantee`), and the GPUs it is owed now (`owed_rate` of what those
    jobs ask for, holding or waiting)."""
    queues = Tenancy(tuple(core_queue(r) for r in session.execute(select(TenantQueue)).scalars()))
    capacity = _healthy_gpus(session)
    serving: dict[str, int] = defaultdict(int)
    for queue, gpus, n in session.execute(
        select(job_queue_column, col(Job.gpus), func.count())
        .select_from(Allocation)
        .join(Job, col(Allocation.job_id) == col(Job.id))
        .group_by(job_queue_column, col(Job.gpus))
    ):
        if fits_guarantee(queues, _key(queue), int(gpus), capacity):
            serving[_key(queue)] += n
    asked = dict(serving)
    for queue, gpus, n in session.execute(
        select(job_queue_column, col(Job.gpus), func.count())
        .where(col(Job.state) == JobState.PENDING)
        .group_by(job_queue_column, col(Job.gpus))
    ):
        if fits_guarantee(queues, _key(queue), int(gpus), capacity):
            asked[_key(queue)] = asked.get(_key(queue), 0) + int(gpus) * n
    owing = {q: owed_rate(own_guarantee(queues, q, capacity), d) for q, d in asked.items()}
    return serving, {q: n for q, n in owing.items() if n > 0}


def _waiting(session: Session) -> dict[str, tuple[int, int]]:
    """Pending jobs per queue: (jobs, GPUs they ask for)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for queue, jobs, gpus in session.execute(
        select(job_queue_column, func.count(), func.sum(col(Job.gpus)))
        .where(col(Job.state) == JobState.PENDING)
        .group_by(job_queue_column)
    ):
        out[_key(queue)][0] += jobs
        out[_key(queue)][1] += int(gpus or 0)  # PostgreSQL sums to a Decimal
    return {q: (a, b) for q, (a, b) in out.items()}


def _healthy_gpus(session: Session) -> int:
    query = select(func.count()).select_from(Gpu).join(Node, col(Gpu.node) == col(Node.name))
    return int(session.execute(query.where(col(Node.healthy))).scalar_one())


@dataclass(slots=True)
class Book:
    """Every queue (declared, or with jobs) with its share now."""

    rows: dict[str, TenantQueue]
    shares: dict[str, QueueShare]
    waiting: dict[str, tuple[int, int]] = field(default_factory=dict)


def book(session: Session, now: float) -> Book:
    rows = {r.name: r for r in session.execute(select(TenantQueue)).scalars()}
    held, waiting = _held(session), _waiting(session)
    out: dict[str, QueueShare] = {}
    for name in sorted({*rows, *held, *waiting}):
        queue = core_queue(rows[name]) if name in rows else best_effort(name)
        used, pinned = held.get(name, (0, 0))
        out[name] = QueueShare(
            queue, used=used, pinned=pinned, pending=waiting.get(name, (0, 0))[1]
        )
    fill(out.values(), _healthy_gpus(session), *_usage(session, now))
    return Book(rows, out, waiting)


# Built once: every scheduling pass asks.
_ANY_QUEUE = select(col(TenantQueue.name)).limit(1)


_MARK = select(
    col(TenantQueue.name), TenantQueue.__table__.c.guaranteed, col(TenantQueue.gpu_limit),
    col(TenantQueue.weight), col(TenantQueue.parent),
).order_by(col(TenantQueue.name))  # fmt: skip


def mark(session: Session) -> tuple[object, ...]:
    """What the queues promise, as a value that changes when an admin changes them
    (a forecast cached before a `queue add|set` is then redone)."""
    return tuple(
        (name, repr(guaranteed), limit, weight, parent)
        for name, guaranteed, limit, weight, parent in session.connection().execute(_MARK)
    )


def declared(session: Session) -> bool:
    """Is any queue declared (the scheduler then runs the policy in `FairShare`)?"""
    return session.connection().execute(_ANY_QUEUE).first() is not None


def observe(session: Session, now: float, half_life: float) -> bool:
    """Settle each queue's decayed usage with the GPUs it holds now and record a
    sample when they changed (or every `RESAMPLE_SECONDS`). Commits; returns
    whether it wrote. Called once per scheduler round while queues are declared."""
    usage = {r.queue: r for r in session.execute(select(QueueUsage)).scalars()}
    held = {q: n for q, (n, _) in _held(session).items()}
    serving, owing = _serving(session)
    names = {*usage, *held, *owing}

    def moved(q: str) -> bool:
        row = usage.get(q)
        was = (row.busy, row.serving, row.owing) if row is not None else (0, 0, 0)
        return was != (held.get(q, 0), serving.get(q, 0), owing.get(q, 0))

    changed = any(moved(q) for q in names)
    stale = any(now - r.at >= RESAMPLE_SECONDS for r in usage.values())
    if not changed and not stale and all(r.half_life == half_life for r in usage.values()):
        return False
    for q in names:
        row = usage.get(q)
        if row is None:
            row = QueueUsage(queue=q, at=now, half_life=half_life)
        row.usage = settle(row.usage, row.busy, now - row.at, row.half_life)
        row.served = settle(row.served, row.serving, now - row.at, row.half_life)
        row.owed = settle(row.owed, row.owing, now - row.at, row.half_life)
        row.busy, row.serving = held.get(q, 0), serving.get(q, 0)
        row.owing = owing.get(q, 0)
        row.at, row.half_life = now, half_life
        session.add(row)
    session.flush()
    current = book(session, now)
    for s in current.shares.values():
        session.add(
            QueueSample(
                at=now, queue=s.name, used=s.used, guaranteed=s.guaranteed, share=round(s.share, 3)
            )
        )
    session.execute(delete(QueueSample).where(col(QueueSample.at) < now - KEEP_SAMPLES_SECONDS))
    session.commit()
    return True


# --- submission ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Membership:
    """The queue records a batch of submissions is checked against (read once)."""

    declared: frozenset[str]
    members: Mapping[str, frozenset[str]]
    defaults: Mapping[str, str]
    # The declared queues (guarantees and limits), None when there are none.
    tenancy: Tenancy | None = None

    def never_starts(self, job: JobView, nodes: Sequence[NodeView]) -> str | None:
        """Why `job` (its queue resolved) could never start under the queues on
        these nodes (the core's rule: its queue's limit), or None. With no node
        registered yet nothing can be judged, as for `waiting.never_servable`."""
        if self.tenancy is None or not nodes:
            return None
        return never_starts(self.tenancy, job, sum(n.num_gpus for n in nodes))

    def admit(self, spec: JobSpec, caller: Caller) -> JobSpec:
        """`spec` with its queue resolved (named, the owner's default, or "default"),
        or BadRequest/Forbidden saying what to change."""
        asked = spec.queue
        name = asked.strip() or self.defaults.get(caller.user, DEFAULT_QUEUE)
        if name not in self.declared and name != DEFAULT_QUEUE:
            known = ", ".join(sorted(self.declared)) or "none is declared"
            raise BadRequest(
                f"no queue {name!r}; the queues are: {known} (see `schedulearn queue list`)"
            )
        members = self.members.get(name)
        if members and caller.user not in members and not caller.is_admin:
            raise Forbidden(
                f"{caller.user} is not a member of queue {name}; an admin adds you with "
                f"`schedulearn queue set {name} --add-user {caller.user}`"
            )
        return spec if name == asked else spec.model_copy(update={"queue": name})


_QUEUES = select(
    col(TenantQueue.name), TenantQueue.__table__.c.guaranteed, col(TenantQueue.gpu_limit),
    col(TenantQueue.weight), col(TenantQueue.parent),
)  # fmt: skip
_MEMBERS = select(col(QueueMember.queue), col(QueueMember.user), col(QueueMember.is_default))


def membership(session: Session) -> Membership:
    # Plain rows from statements built once: every submission batch reads them.
    conn = session.connection()
    rows = conn.execute(_QUEUES).all()
    declared = frozenset(str(r[0]) for r in rows)
    members: dict[str, set[str]] = defaultdict(set)
    defaults: dict[str, str] = {}
    tenancy = None
    if declared:
        for queue, user, is_default in conn.execute(_MEMBERS):
            members[queue].add(user)
            if is_default:
                defaults[user] = queue
        tenancy = Tenancy(tuple(_core(*r) for r in rows))
    return Membership(declared, {q: frozenset(u) for q, u in members.items()}, defaults, tenancy)
