"""What an agent may touch: its own node, and the attempts placed there.

The one place the agent routes are authorized. Each agent route calls one
function here with the caller's `AgentIdentity` (from its credential,
`services.enrollment`); it checks, then hands over to the service that
does the work (`agents`, `logs`, `progress`, `checkpoints`) in the same
session. The rule:

- a node name in a request (registration, heartbeat, work poll, the
  `node` of an event, log or progress batch, or checkpoint upload) must
  be the caller's own; an empty one means the caller's;
- a report about a job (event, logs, progress, checkpoint upload) needs
  a part of that attempt placed on the caller's node (`owns_attempt`);
- a checkpoint download needs a part of the job's current attempt on
  the caller's node.

Anything else is refused with 403 before anything is written. A report
about a job that does not exist stays a 404; an event of a job or an
attempt that exists on no node is acknowledged as ignored, as before (the
lifecycle changes nothing for it), while one placed on another node is
refused, and an event batch with any such event is refused whole. A
part never moves between nodes, so a check cannot be outdated by the
time the work it guards runs.

A part the server wrote off (`lost`: its node went down, or its lease
lapsed) is superseded: its job runs again as a newer attempt. Events,
log batches, progress and uploads (checkpoint, full log) about it are
refused (409 naming both attempts; in an event batch, that event is
acknowledged as ignored and the rest recorded) and change nothing, so a
copy that outlived its lease cannot touch the job. One exception: the
exit of a copy that ended on its own while its node was out of touch is
honoured if the job has not run again yet (`lifecycle.late_exit`). The
agent takes a refusal as final (`agent.client.until_acked`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import bindparam
from sqlmodel import Session, col, select

from schedulearn.protocol import (
    Ack,
    CheckpointRef,
    Heartbeat,
    JobEvent,
    JobEventReport,
    LogBatch,
    NodeRegistration,
    ProgressBatch,
    WorkBatch,
)
from schedulearn.server.errors import Conflict, Forbidden, NotFound, ServiceError
from schedulearn.server.models import Job, JobPart, PartStatus
from schedulearn.server.services import agents, checkpoints, enrollment, heartbeats, logs, progress
from schedulearn.server.services.agents import AgentTiming, EventsRecorded, Registered
from schedulearn.server.services.enrollment import AgentIdentity
from schedulearn.server.services.heartbeats import Beat
from schedulearn.server.states import StaleState
from schedulearn.server.wakeups import Changes

log = logging.getLogger(__name__)


def own_node(who: AgentIdentity, named: str) -> str:
    """The caller's node, if `named` is it (or empty); 403 otherwise."""
    node = who.bound
    if named and named != node:
        raise Forbidden(
            f"this credential is node {node!r}'s; it cannot act for node {named!r} "
            "(each node has its own: `schedulearn node add NAME`)"
        )
    return node


def owns_attempt(session: Session, node: str, job_id: int, attempt: int) -> bool:
    """Whether attempt `attempt` of job `job_id` has a part placed on `node`."""
    found = session.exec(
        select(JobPart.id)
        .where(JobPart.job_id == job_id, JobPart.attempt == attempt, JobPart.node == node)
        .limit(1)
    ).first()
    return found is not None


def _placed(session: Session, job_id: int, attempt: int) -> bool:
    """Whether attempt `attempt` of job `job_id` has a part on any node."""
    found = session.exec(
        select(JobPart.id).where(JobPart.job_id == job_id, JobPart.attempt == attempt).limit(1)
    ).first()
    return found is not None


def _refuse(node: str, job_id: int, attempt: int) -> None:
    raise Forbidden(
        f"attempt {attempt} of job {job_id} was not placed on node {node!r}; a node reports "
        "only on its own jobs"
    )


def require_attempt(session: Session, node: str, job_id: int, attempt: int) -> None:
    """403 unless the attempt has a part on `node` (404 for a job that does not exist)."""
    if owns_attempt(session, node, job_id, attempt):
        return
    if session.get(Job, job_id) is None:
        raise NotFound(f"no job {job_id}")
    _refuse(node, job_id, attempt)


def superseded(job_id: int, attempt: int, node: str, current: int | None) -> str:
    """Why a report about a written-off part is refused (names both attempts)."""
    now = f"attempt {current}" if current is not None else "a newer attempt"
    return (
        f"attempt {attempt} of job {job_id} on node {node!r} was written off (its node was "
        f"lost, or its lease lapsed) and is superseded by {now}; this report is refused and "
        "changes nothing"
    )


def require_live(session: Session, node: str, job_id: int, attempt: int) -> None:
    """409 when the server wrote off the attempt's part on `node` (see above)."""
    lost = session.exec(
        select(JobPart.id)
        .where(
            JobPart.job_id == job_id,
            JobPart.attempt == attempt,
            JobPart.node == node,
            JobPart.status == PartStatus.LOST,
        )
        .limit(1)
    ).first()
    if lost is None:
        return
    job = session.get(Job, job_id)
    current = job.attempt if job is not None and job.attempt != attempt else None
    raise Conflict(superseded(job_id, attempt, node, current))


# --- node-level calls ------------------------------------------------------------


def register(
    session: Session, who: AgentIdentity, reg: NodeRegistration, now: float, timing: AgentTiming
) -> Registered:
    # An old-style token is bound here, in the registration's own transaction.
    node = enrollment.bind_on_registration(session, who, reg.name, now)
    own_node(AgentIdentity(who.digest, node), reg.name)
    return agents.register(session, reg, now, timing)


def heartbeat(
    session: Session, who: AgentIdentity, beat: Heartbeat, now: float, timing: AgentTiming
) -> Beat:
    own_node(who, beat.name)
    return heartbeats.record(session, beat, now, timing.report_grace)


def take_work(
    session: Session, who: AgentIdentity, node: str, now: float, timing: AgentTiming
) -> WorkBatch:
    # Checked again on each pass of the long poll, so that `node rm` ends it at once.
    enrollment.identify(session, who.digest, now)
    return agents.take_work(session, own_node(who, node), now, timing)


# --- reports about jobs ------------------------------------------------------------


def record_event(
    session: Session, who: AgentIdentity, job_id: int, event: JobEvent, now: float
) -> Changes:
    node = own_node(who, event.node)
    if not owns_attempt(session, node, job_id, event.attempt) and _placed(
        session, job_id, event.attempt
    ):
        _refuse(node, job_id, event.attempt)
    event = event.model_copy(update={"node": node})
    try:
        require_live(session, node, job_id, event.attempt)
    except Conflict:
        honoured = agents.record_late_exit(session, job_id, event, now)
        if honoured is None:
            raise
        return honoured
    return agents.record_event(session, job_id, event, now)


# Built once (every batch of events runs it): see `agents._NEW_PARTS`. By
# job id alone, the node compared here: with `node = ?` in the statement,
# SQLite walked every part the node ever ran (its `node, status` index), a
# cost that grew with the node's history.
_PARTS_OF = select(JobPart.job_id, JobPart.attempt, JobPart.node, JobPart.status).where(
    col(JobPart.job_id).in_(bindparam("ids", expanding=True))
)


# How often a batch of events is read and recorded again when another writer
# moved one of its jobs or parts between its reads and its writes.
EVENT_TRIES = 3


def record_events(
    session: Session, who: AgentIdentity, reports: list[JobEventReport], now: float
) -> EventsRecorded:
    """A batch is refused whole (nothing recorded) if any event is not the caller's.

    Another writer may move a job or part of the batch between its reads
    and its conditional writes (a heartbeat or the reaper losing the part,
    a cancel, another replica): the batch then rolls back with `StaleState`
    and is read and recorded again, so that, say, the exit of a part just
    written off is judged as a late exit. Under load this race is common;
    it used to answer 500 (issue 36).
    """
    for attempt in range(1, EVENT_TRIES + 1):
        try:
            return _record_events(session, who, reports, now)
        except StaleState:
            session.rollback()
            if attempt == EVENT_TRIES:
                raise
            log.info("a batch of %d events raced another writer; reading it again", len(reports))
    raise AssertionError("unreachable: the last try returns or raises")


def _record_events(
    session: Session, who: AgentIdentity, reports: list[JobEventReport], now: float
) -> EventsRecorded:
    node = who.bound
    for report in reports:
        own_node(who, report.node)
    pairs = {(r.job_id, r.attempt) for r in reports}
    ids = {job_id for job_id, _ in pairs}
    # A plain read (every batch of events passes here): no ORM statement, no autoflush.
    owned: set[tuple[int, int]] = set()
    written_off: set[tuple[int, int]] = set()
    elsewhere: set[tuple[int, int]] = set()
    for job_id, attempt, on, status in session.connection().execute(_PARTS_OF, {"ids": list(ids)}):
        if on != node:
            elsewhere.add((job_id, attempt))
            continue
        owned.add((job_id, attempt))
        if status == PartStatus.LOST:
            written_off.add((job_id, attempt))
    # An event of a job, or an attempt, that exists nowhere is acknowledged as
    # ignored, as before (it changes nothing); one placed on another node only
    # (not a gang with a part here too) is refused.
    foreign = sorted((elsewhere - owned) & pairs)
    if foreign:
        job_id, attempt = foreign[0]
        raise Forbidden(
            f"attempt {attempt} of job {job_id} was not placed on node {node!r}; a node "
            "reports only on its own jobs (nothing in this batch was recorded)"
        )
    reports = [r.model_copy(update={"node": node}) for r in reports]
    mine = [r for r in reports if (r.job_id, r.attempt) not in written_off]
    if len(mine) == len(reports):
        return agents.record_events(session, mine, now)
    # Events of written-off parts: an exit the job has not outrun is honoured
    # (each in its own transaction, first); the rest are acknowledged as
    # ignored (sending them again cannot help). Then the others are recorded.
    changes = Changes()
    late: dict[int, Ack] = {}
    for i, r in enumerate(reports):
        if (r.job_id, r.attempt) in written_off:
            honoured = agents.record_late_exit(session, r.job_id, r, now)
            if honoured is not None:
                changes.merge(honoured)
            late[i] = Ack(ignored=honoured is None)
    recorded = agents.record_events(session, mine, now) if mine else None
    if recorded is not None:
        changes.merge(recorded.changes)
    given = iter(recorded.acks if recorded is not None else [])
    acks = [late[i] if i in late else next(given) for i in range(len(reports))]
    return EventsRecorded(acks, changes)


def append_logs_many(
    session: Session, items: list[tuple[AgentIdentity, int, LogBatch]], cap: int
) -> list[logs.Appended | Exception]:
    """Store the log batches of many runs (`logs.append`), in one transaction.

    With hundreds of nodes each run's batch was a transaction of its own,
    the largest share of the database threads' time (bench/scale.py,
    docs/results.md 10.2). A batch refused (not this node's attempt, a
    part written off, no such job) is refused before it writes anything,
    and alone; an error while writing fails the whole transaction, and
    every agent sends its batch again.
    """
    results: list[logs.Appended | Exception | None] = [None] * len(items)
    # In job order, the order the jobs' log usage rows are locked in (a
    # job's own batches keep theirs: the sort is stable).
    for i in sorted(range(len(items)), key=lambda i: items[i][1]):
        who, job_id, batch = items[i]
        try:
            node = own_node(who, batch.node)
            _require_live_run(session, node, job_id, batch.attempt)
        except ServiceError as exc:
            results[i] = exc
            continue
        mine = batch.model_copy(update={"node": node})
        # The run's part exists, so its job does (jobs are never deleted).
        results[i] = logs.append(session, job_id, mine, cap, commit=False, known=True)
    session.commit()
    return [r for r in results if r is not None]


# The statuses of a run's parts on a node, built once (a log batch per run and
# more: building the statement cost more than running it).
_RUN_PARTS = select(col(JobPart.status)).where(
    col(JobPart.job_id) == bindparam("job"),
    col(JobPart.attempt) == bindparam("attempt"),
    col(JobPart.node) == bindparam("node"),
)


def _require_live_run(session: Session, node: str, job_id: int, attempt: int) -> None:
    """`require_attempt` and `require_live` in one plain read when the run is
    placed on `node` and not written off (the common case); their own errors
    otherwise."""
    params = {"job": job_id, "attempt": attempt, "node": node}
    statuses = [PartStatus(s) for s in session.connection().execute(_RUN_PARTS, params).scalars()]
    if not statuses:
        require_attempt(session, node, job_id, attempt)  # raises: 404 or 403
    if PartStatus.LOST in statuses:
        require_live(session, node, job_id, attempt)  # raises: 409


def record_progress(
    session: Session, who: AgentIdentity, job_id: int, batch: ProgressBatch
) -> Changes:
    node = own_node(who, batch.node)
    require_attempt(session, node, job_id, batch.attempt)
    require_live(session, node, job_id, batch.attempt)
    return progress.record(session, job_id, batch.model_copy(update={"node": node}))


# --- checkpoints -------------------------------------------------------------------


def may_upload(session: Session, who: AgentIdentity, job_id: int, attempt: int, node: str) -> str:
    """Checked before the upload is read; returns the node to record it under."""
    mine = own_node(who, node)
    require_attempt(session, mine, job_id, attempt)
    require_live(session, mine, job_id, attempt)
    return mine


def download(
    session: Session, who: AgentIdentity, store: Path, job_id: int
) -> tuple[Path, CheckpointRef]:
    node = who.bound
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    if not owns_attempt(session, node, job_id, job.attempt):
        raise Forbidden(
            f"job {job_id}'s current attempt is not placed on node {node!r}; a node downloads "
            "only the checkpoints of jobs it is to run"
        )
    return checkpoints.download(session, store, job_id)
