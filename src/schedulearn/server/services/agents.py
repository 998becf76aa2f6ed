"""The agent side of the API: registration, heartbeats, work, events, silence.

Owns the `node` and `gpu` tables and the delivery flags of `job_part`
(what each agent has been sent). Reconciliation rules:

- on registration, a part the agent still runs is adopted; a part the
  agent was sent but no longer runs is lost (and requeued); a run the
  agent reports that the server does not know is listed for it to stop;
- a heartbeat that omits a delivered part for longer than the grace
  period loses that part the same way (`heartbeats`: its rule, and the
  heartbeat's writes);
- a node silent past `node_timeout_seconds` is marked down and all its
  parts are lost (`reap`).

Leases: every registration and heartbeat reply renews the node's lease
for `lease_seconds` (`lease_reply`). An agent that cannot renew it stops
its jobs when it lapses, which is before the node timeout (the settings
refuse a lease that is not), so by the time `reap` requeues a silent
node's parts, their runs are gone. The parts a lapsed agent stopped are
missing from its next registration: lost to a node failure (counted in
`node_losses`), not the jobs' fault.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, bindparam, delete, func, select, update
from sqlmodel import Session, col

from schedulearn.protocol import (
    Ack,
    Assignment,
    CheckpointRef,
    EventKind,
    GangInfo,
    JobEvent,
    JobEventReport,
    JobState,
    NodeRegistration,
    RegistrationReply,
    RunAs,
    RunningJobReport,
    StopOrder,
    StopReason,
    WorkBatch,
)
from schedulearn.server.errors import NotFound
from schedulearn.server.models import Gpu, Job, JobCheckpoint, JobPart, Node, PartStatus
from schedulearn.server.services import checkpoints, event_batch, lifecycle, nodes, users
from schedulearn.server.services.arrays import array_env
from schedulearn.server.states import JobRef, transition
from schedulearn.server.wakeups import Changes

LIVE = lifecycle.LIVE
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentTiming:
    heartbeat_seconds: float
    node_timeout_seconds: float
    stop_grace_seconds: float
    gang_base_port: int
    checkpoint_dir: str | None
    # The lease each reply grants (None: none) and the SIGTERM-to-SIGKILL time
    # of a job stopped when it lapses (`settings.ServerSettings.lease`).
    lease_seconds: float | None = None
    lease_grace_seconds: float = 0.0
    # The largest checkpoint upload taken: agents stop packing before it.
    checkpoint_max_bytes: int | None = None

    def lease_reply(self) -> dict[str, Any]:
        """The lease fields of a registration or heartbeat reply."""
        return {
            "lease_seconds": self.lease_seconds,
            "lease_grace_seconds": self.lease_grace_seconds,
        }

    @property
    def report_grace(self) -> float:
        """How long a delivered part may be missing from heartbeats before it is lost."""
        return max(3 * self.heartbeat_seconds, 5.0)


@dataclass(slots=True)
class Registered:
    reply: RegistrationReply
    changes: Changes


def _live_parts_on(session: Session, node: str) -> list[JobPart]:
    return list(
        session.execute(
            select(JobPart)
            .where(col(JobPart.node) == node, col(JobPart.status).in_(LIVE))
            # id order: the lock order every bulk update of parts keeps.
            .order_by(col(JobPart.id))
        ).scalars()
    )


def _lose(
    session: Session,
    part: JobPart,
    now: float,
    why: str,
    changes: Changes,
    cause: lifecycle.LossCause = lifecycle.LossCause.RUN_VANISHED,
) -> None:
    job = session.get(Job, part.job_id)
    if job is not None:
        changes.merge(lifecycle.part_lost(session, job, part, now, why, cause))


def register(
    session: Session, reg: NodeRegistration, now: float, timing: AgentTiming
) -> Registered:
    changes = Changes(scheduler=True, nodes={reg.name})
    node = session.get(Node, reg.name)
    if node is None:
        node = Node(name=reg.name, registered_at=now)
    nodes.apply_registration(node, reg)
    node.healthy = True
    node.last_seen = now
    session.add(node)
    session.execute(delete(Gpu).where(col(Gpu.node) == reg.name))
    for g in reg.gpus:
        session.add(
            Gpu(node=reg.name, index=g.index, uuid=g.uuid, type=g.type, memory_mb=g.memory_mb)
        )
    reported = {(r.job_id, r.attempt) for r in reg.running}
    adopt: list[int] = []
    known: set[tuple[int, int]] = set()
    for part in _live_parts_on(session, reg.name):
        key = (part.job_id, part.attempt)
        if key in reported:
            known.add(key)
            adopt.append(part.job_id)
            part.last_reported = now
            if part.stop_reason is not None:
                part.stop_sent = False  # say it again: the old agent may not have acted
            session.add(part)
            if part.status == PartStatus.ASSIGNED:
                job = session.get(Job, part.job_id)
                if job is not None:
                    changes.merge(lifecycle.part_started(session, job, part, now))
        elif part.delivered:
            _lose(
                session,
                part,
                now,
                f"node {reg.name} registered again and no longer runs it (restarted, or its "
                "lease lapsed)",
                changes,
                lifecycle.LossCause.NODE_DOWN,
            )
    lost = sorted({job_id for job_id, attempt in reported - known})
    session.commit()
    reply = RegistrationReply(
        heartbeat_seconds=timing.heartbeat_seconds, adopt=adopt, lost=lost, **timing.lease_reply()
    )
    return Registered(reply, changes)


_NODES = Node.__table__
# Built once: every pass asks.
_ANY_SILENT = (
    select(_NODES.c.name)
    .where(_NODES.c.healthy == True, _NODES.c.last_seen < bindparam("cutoff"))  # noqa: E712
    .limit(1)
)


_HEALTHY = select(func.count()).select_from(_NODES).where(_NODES.c.healthy == True)  # noqa: E712
# Marks one node down only if it is still silent as the write takes its row:
# a heartbeat written meanwhile on another database thread (PostgreSQL) has
# been answered with a lease, and its node must stay up.
_DOWN = (
    update(_NODES)
    .where(
        _NODES.c.name == bindparam("node"),
        _NODES.c.healthy == True,  # noqa: E712
        _NODES.c.last_seen < bindparam("cutoff"),
    )
    .values(healthy=False)
)


def healthy_nodes(session: Session) -> int:
    """How many nodes are up (`heartbeat_pace` stretches the interval with it)."""
    return int(session.connection().execute(_HEALTHY).scalar_one())


def reap(
    session: Session,
    now: float,
    timeout: float,
    since: float,
    claim: Callable[[Iterable[str], float], set[str]] | None = None,
) -> Changes:
    """Mark nodes silent for `timeout` seconds down and lose their parts.

    `since` is when this server started: silence while the server itself
    was down does not count against a node. `claim` (`HeartbeatBook.
    claim_silent`) says which of the nodes silent in the database this
    replica has not heard from either, its heartbeats not yet written.
    """
    changes = Changes()
    cutoff = now - timeout
    if since > cutoff:
        return changes
    # Runs every pass: a plain read first, the ORM only when a node is silent.
    if session.connection().execute(_ANY_SILENT, {"cutoff": cutoff}).first() is None:
        return changes
    silent = (
        session.execute(
            select(Node).where(col(Node.healthy) == True, col(Node.last_seen) < cutoff)  # noqa: E712
        )
        .scalars()
        .all()
    )
    if claim is not None:
        unheard = claim([n.name for n in silent], cutoff)
        silent = [n for n in silent if n.name in unheard]
    conn = session.connection()
    for node in silent:
        # Not `node.healthy = False`: that write would follow a heartbeat that
        # committed since the read above (its row lock released to us), and
        # mark down a node whose agent was just granted a lease.
        if conn.execute(_DOWN, {"node": node.name, "cutoff": cutoff}).rowcount != 1:
            continue
        changes.scheduler = True
        changes.nodes.add(node.name)
        for part in _live_parts_on(session, node.name):
            _lose(
                session,
                part,
                now,
                f"node {node.name} stopped answering",
                changes,
                lifecycle.LossCause.NODE_DOWN,
            )
    if silent:
        session.commit()
    return changes


_PARTS = JobPart.__table__
_JOBS = Job.__table__
# What a start needs of the part and of its job (`_assignment`), read as plain rows.
_PART_COLUMNS = [_PARTS.c[n] for n in ("id", "job_id", "attempt", "rank", "gpus")]
_JOB_COLUMNS = [
    _JOBS.c[n]
    for n in (
        "id", "name", "user", "command", "image", "env", "secret_env", "workdir", "cpus",
        "memory_gb", "shm_size", "launcher", "executor", "preemptible", "placement",
        "array_id", "array_index", "array_size",
    )
]  # fmt: skip
# take_work's statements, built once: every poll runs them, and building a
# statement and its cache key costs more than SQLite takes to run it.
_NEW_PARTS = (
    select(*_PART_COLUMNS)
    .where(
        _PARTS.c.node == bindparam("node"),
        _PARTS.c.status == PartStatus.ASSIGNED,
        _PARTS.c.delivered == False,  # noqa: E712
    )
    .order_by(_PARTS.c.id)
)
_STOPS = (
    select(_PARTS.c.id, _PARTS.c.job_id, _PARTS.c.attempt, _PARTS.c.stop_reason)
    .where(
        _PARTS.c.node == bindparam("node"),
        _PARTS.c.stop_reason != None,  # noqa: E711
        _PARTS.c.stop_sent == False,  # noqa: E712
        _PARTS.c.status.in_(LIVE),
    )
    .order_by(_PARTS.c.id)
)
_JOBS_OF = select(*_JOB_COLUMNS).where(_JOBS.c.id.in_(bindparam("ids", expanding=True)))
_CHECKPOINTS_OF = select(
    col(JobCheckpoint.job_id),
    col(JobCheckpoint.attempt),
    col(JobCheckpoint.sha256),
    col(JobCheckpoint.size_bytes),
).where(col(JobCheckpoint.job_id).in_(bindparam("ids", expanding=True)))
# In id order (the caller's), the lock order of every bulk update of parts.
_DELIVERED = (
    update(_PARTS)
    .where(_PARTS.c.id.in_(bindparam("ids", expanding=True)))
    .values(delivered=True, last_reported=bindparam("now"))
)
_STOPS_SENT = (
    update(_PARTS).where(_PARTS.c.id.in_(bindparam("ids", expanding=True))).values(stop_sent=True)
)


def take_work(session: Session, node: str, now: float, timing: AgentTiming) -> WorkBatch:
    """Starts and stops not yet sent to `node`; marks them sent.

    Plain rows and set-based updates, not ORM objects: every job passes
    here once, and most polls find nothing.
    """
    conn = session.connection()
    new = conn.execute(_NEW_PARTS, {"node": node}).all()
    stops = conn.execute(_STOPS, {"node": node}).all()
    # Stamped with the clock that writes the parts' `last_reported`: the
    # agent echoes it in its heartbeats (`heartbeats.gone`).
    batch = WorkBatch(at=now)
    if not new and not stops:
        return batch
    if new:
        ids = {part.job_id for part in new}
        jobs = {r.id: r for r in conn.execute(_JOBS_OF, {"ids": list(ids)})}
        carried: dict[int, CheckpointRef] = {}
        if timing.checkpoint_dir is None:
            # Every job's checkpoint in one query.
            rows = conn.execute(_CHECKPOINTS_OF, {"ids": list(ids)})
            carried = {row.job_id: checkpoints.ref_of(row) for row in rows}
        # Every owner's account in one query (a lookup per job cost a query each).
        accounts = users.unix_accounts(session, {job.user for job in jobs.values()})
        for part in new:
            job = jobs[part.job_id]
            batch.starts.append(
                _assignment(
                    session, job, part, timing, carried.get(part.job_id), accounts.get(job.user)
                )
            )
        # In id order, the lock order of every bulk update of parts.
        conn.execute(_DELIVERED, {"ids": [part.id for part in new], "now": now})
    if stops:
        conn.execute(_STOPS_SENT, {"ids": [part.id for part in stops]})
        batch.stops.extend(
            StopOrder(
                job_id=part.job_id,
                attempt=part.attempt,
                reason=StopReason(part.stop_reason),
                grace_seconds=timing.stop_grace_seconds,
            )
            for part in stops
        )
    session.commit()
    return batch


def _assignment(
    session: Session,
    job: Row[Any],
    part: Row[Any],
    timing: AgentTiming,
    checkpoint: CheckpointRef | None = None,
    run_as: RunAs | None = None,
) -> Assignment:
    gang = None
    placement: dict[str, list[int]] = job.placement or {}
    if len(placement) > 1:
        master = session.execute(
            select(col(JobPart.node)).where(
                col(JobPart.job_id) == part.job_id,
                col(JobPart.attempt) == part.attempt,
                col(JobPart.rank) == 0,
            )
        ).scalar_one()
        master_node = session.get(Node, master)
        gang = GangInfo(
            world_size=len(placement),
            node_rank=part.rank,
            master_addr=master_node.address if master_node else "127.0.0.1",
            master_port=timing.gang_base_port + (job.id or 0) % 10000,
            nproc_per_node=max(1, len(part.gpus)),
        )
    share = len(part.gpus) / max(1, sum(len(g) for g in placement.values()))
    shared = f"{timing.checkpoint_dir}/job-{job.id}" if timing.checkpoint_dir else None
    return Assignment(
        job_id=job.id or 0,
        attempt=part.attempt,
        name=job.name,
        user=job.user,
        command=job.command,
        image=job.image,
        env={**job.env, **array_env(job)},
        secret_env=dict(job.secret_env or {}),
        workdir=job.workdir,
        gpus=list(part.gpus),
        cpus=job.cpus * share if gang else job.cpus,
        memory_gb=job.memory_gb * share if gang else job.memory_gb,
        shm_size=job.shm_size,
        launcher=job.launcher,
        executor=job.executor,
        gang=gang,
        checkpoint_dir=shared,
        # Without a shared path the server carries the checkpoint: every part
        # downloads it before starting, rank 0 uploads it after a preemption.
        checkpoint=checkpoint if shared is None else None,
        upload_checkpoint=shared is None and job.preemptible and part.rank == 0,
        checkpoint_max_bytes=timing.checkpoint_max_bytes,
        # An agent started as root runs the job as its owner's unix account.
        run_as=run_as,
    )


@dataclass(slots=True)
class EventsRecorded:
    acks: list[Ack]
    changes: Changes


def record_event(session: Session, job_id: int, event: JobEvent, now: float) -> Changes:
    """One event in its own transaction; `NotFound` when the job does not exist."""
    changes = _apply_event(session, job_id, event, now)
    session.commit()
    return changes


def record_events(session: Session, reports: list[JobEventReport], now: float) -> EventsRecorded:
    """A batch of events, in one transaction when all goes well.

    The batch is recorded set-based (`event_batch`: a few statements for
    the whole batch); the events that path hands back (a gang's exit, an
    exit during a preemption) are applied one by one after it, in the
    same transaction. An event for a job that does not exist is
    acknowledged as ignored (no retry can help it). Should anything fail,
    the batch is rolled back and each event is recorded in a transaction
    of its own, so one bad event costs the others nothing; the failed one
    is acknowledged `ok=False` and the agent sends it again.
    """
    try:
        plan = event_batch.record(session, reports, now)
        acks: list[Ack] = []
        for report, ack in zip(reports, plan.acks, strict=True):
            if ack is None:  # handed back: lifecycle's rules, one event at a time
                ack = _apply_or_ignore(session, report, now, plan.changes)
            acks.append(ack)
        session.commit()
        return EventsRecorded(acks, plan.changes)
    except Exception:
        session.rollback()
        if len(reports) == 1:
            raise
        log.warning("a batch of %d events failed; recording them one by one", len(reports))
    changes, acks = Changes(), []
    for report in reports:
        try:
            acks.append(_apply_or_ignore(session, report, now, changes))
            session.commit()
        except Exception:
            session.rollback()
            log.exception("could not record the %s event of job %s", report.kind, report.job_id)
            acks.append(Ack(ok=False))
    return EventsRecorded(acks, changes)


def _apply_or_ignore(session: Session, report: JobEventReport, now: float, into: Changes) -> Ack:
    try:
        changes = _apply_event(session, report.job_id, report, now)
    except NotFound:
        return Ack(ignored=True)
    into.merge(changes)
    return Ack(ignored=not changes.jobs)


def _apply_event(session: Session, job_id: int, event: JobEvent, now: float) -> Changes:
    if event.kind is EventKind.STARTED:
        return _record_start(session, job_id, event, now)
    # Fresh rows: an earlier event of the same batch may have changed them.
    job = session.get(Job, job_id, populate_existing=True)
    if job is None:
        raise NotFound(f"no job {job_id}")
    # Every part of the attempt in one query: the reporting node's, and its
    # siblings, which decide whether the job has ended.
    query = (
        select(JobPart)
        .where(col(JobPart.job_id) == job_id, col(JobPart.attempt) == event.attempt)
        .order_by(col(JobPart.rank))
        .execution_options(populate_existing=True)
    )
    siblings = list(session.execute(query).scalars())
    parts = [p for p in siblings if p.node == event.node] if event.node else siblings
    if not parts:
        return Changes()
    part = next((p for p in parts if p.status in LIVE), parts[0])
    return lifecycle.part_exited(
        session,
        job,
        part,
        event.exit_code,
        now,
        failed_to_start=event.kind is EventKind.FAILED_TO_START,
        message=event.message,
        siblings=siblings,
        on_its_own=event.on_its_own,
    )


def record_late_exit(session: Session, job_id: int, event: JobEvent, now: float) -> Changes | None:
    """The exit of a written-off part on `event.node`, honoured and committed
    when the job has not run again (`lifecycle.late_exit`); None otherwise."""
    if event.kind is not EventKind.EXITED:
        return None
    part = session.execute(
        select(JobPart).where(
            col(JobPart.job_id) == job_id,
            col(JobPart.attempt) == event.attempt,
            col(JobPart.node) == event.node,
            col(JobPart.status) == PartStatus.LOST,
        )
    ).scalar_one_or_none()
    job = session.get(Job, job_id) if part is not None else None
    if part is None or job is None:
        return None
    changes = lifecycle.late_exit(session, job, part, event.exit_code, event.at, now)
    if changes is not None:
        session.commit()
    return changes


def _record_start(session: Session, job_id: int, event: JobEvent, now: float) -> Changes:
    """A part started: the hot path of every job, in three small statements."""
    conn = session.connection()
    row = conn.execute(
        select(col(Job.state), col(Job.attempt)).where(col(Job.id) == job_id)
    ).first()
    if row is None:
        raise NotFound(f"no job {job_id}")
    conds = [
        col(JobPart.job_id) == job_id,
        col(JobPart.attempt) == event.attempt,
        col(JobPart.status) == PartStatus.ASSIGNED,
    ]
    if event.node:
        conds.append(col(JobPart.node) == event.node)
    conn.execute(
        update(JobPart.__table__).where(*conds).values(status=PartStatus.RUNNING, last_reported=now)
    )
    if row.attempt == event.attempt and row.state == JobState.ASSIGNED.value:
        transition(session, JobRef(job_id, row.state, row.attempt), JobState.RUNNING, now)
    return Changes(jobs={job_id})


def orphan_orders(orphans: list[RunningJobReport], timing: AgentTiming) -> list[StopOrder]:
    """Stop orders for runs an agent reports that the server does not know."""
    return [
        StopOrder(
            job_id=o.job_id,
            attempt=o.attempt,
            reason=StopReason.LOST,
            grace_seconds=timing.stop_grace_seconds,
        )
        for o in orphans
    ]
