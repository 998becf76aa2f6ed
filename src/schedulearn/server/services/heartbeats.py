"""A node's heartbeat, recorded in a few set-based statements.

Owns the heartbeat's writes (`node.last_seen`, `job_part.last_reported`)
and the rule that loses a delivered run a heartbeat no longer lists.
Every node sends one every `heartbeat_seconds`, so at 1,000 nodes this is
the server's busiest write: one conditional UPDATE of the node (which
also says whether the server still knows it), one plain read of its live
parts, one UPDATE of the parts it lists, one commit. The ORM is used only
in the rare case that a run is lost (`lifecycle.part_lost`).

When is a run gone? A delivered part the heartbeat omits is lost once it
has gone unlisted for longer than `report_grace`. But a heartbeat may be
built before its agent received the work batch that handed the part out,
and recorded seconds later by a busy server: judged by when the server
records it, it would lose a run its agent could not yet have listed
(issue 36: thousands of runs lost under load). So an agent of protocol 5
says which batch it had acted on (`Heartbeat.work_through`, echoing the
batch's `at`, which is the same server clock that wrote `last_reported`),
and a part is judged only when that batch is at least as new as the
part's last report: the heartbeat then had the run in view, and left it
out. Both times are the server's, so the agent's clock never enters the
rule. An agent that says nothing (protocol 4 or older) is judged as
before.

The price: once a run's start or a heartbeat listing it has been
recorded, a heartbeat judges it only after its agent has acted on a
newer batch, and a work poll is answered at the latest when its wait
ends (`poll_wait_seconds`, 20 s). A run that vanished without an exit
report is lost that much later; one whose heartbeat waited in a queue is
never lost for it.

In groups (`record_many`): a server with many nodes answers a known
node's heartbeat from memory (`server.heartbeat_book`) and writes the
heartbeats heard meanwhile in one transaction, each at the time it
arrived. A part's `last_reported` only moves forward then: a handout
written after a heartbeat arrived, and before the heartbeat was written,
keeps its own, later time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection, bindparam, select, update
from sqlmodel import Session

from schedulearn.protocol import Heartbeat, RunningJobReport
from schedulearn.server.models import Job, JobPart, Node, PartStatus
from schedulearn.server.services import lifecycle
from schedulearn.server.states import StaleState
from schedulearn.server.wakeups import Changes

_NODES = Node.__table__
_PARTS = JobPart.__table__
# Built once: every heartbeat runs them.
_SEEN = (
    update(_NODES)
    .where(_NODES.c.name == bindparam("node"), _NODES.c.healthy == True)  # noqa: E712
    .values(last_seen=bindparam("now"))
)
_LIVE_HERE = (
    select(
        _PARTS.c.id,
        _PARTS.c.job_id,
        _PARTS.c.attempt,
        _PARTS.c.delivered,
        _PARTS.c.last_reported,
    )
    .where(_PARTS.c.node == bindparam("node"), _PARTS.c.status.in_(lifecycle.LIVE))
    .order_by(_PARTS.c.id)
)
_ENDED_HERE = select(_PARTS.c.job_id, _PARTS.c.attempt).where(
    _PARTS.c.node == bindparam("node"),
    _PARTS.c.job_id.in_(bindparam("ids", expanding=True)),
    _PARTS.c.status == PartStatus.EXITED,
)
# In id order (the caller's), the lock order of every bulk update of parts.
# Never backwards: a heartbeat written late (`record_many`) is older than a
# handout or a start recorded after it arrived.
_REPORTED = (
    update(_PARTS)
    .where(
        _PARTS.c.id.in_(bindparam("ids", expanding=True)),
        _PARTS.c.last_reported < bindparam("now"),
    )
    .values(last_reported=bindparam("now"))
)


@dataclass(slots=True)
class Beat:
    known: bool
    changes: Changes
    orphans: list[RunningJobReport] = field(default_factory=list)


def gone(
    delivered: bool, last_reported: float, now: float, grace: float, work_through: float | None
) -> bool:
    """Whether a live part that a heartbeat recorded at `now` omits is lost.

    `last_reported` is when the server handed the part out or last heard
    of it (a heartbeat listing it, its start); `work_through` is the
    heartbeat's `Heartbeat.work_through` (None from an older agent).
    """
    if not delivered or now - last_reported <= grace:
        return False
    # The heartbeat had the run in view only if its agent had acted on the
    # batch that handed it out, or on a later one.
    return work_through is None or work_through >= last_reported


def record(session: Session, beat: Heartbeat, now: float, grace: float) -> Beat:
    """Record `beat` at `now`; runs unlisted past `grace` seconds are lost."""
    done = _record(session, beat, now, grace)
    if done.known:
        session.commit()
    else:
        session.rollback()
    return done


def record_many(session: Session, beats: list[tuple[Heartbeat, float]], grace: float) -> list[Beat]:
    """Record each `(beat, arrived)` at its arrival, all in one transaction.

    A run lost meanwhile by another writer (`StaleState`) must not cost the
    other beats theirs: then each is recorded again in a transaction of its
    own, and a beat that fails alone is reported as known with no changes
    (the node's next heartbeat is judged afresh).
    """
    try:
        done = [_record(session, beat, arrived, grace) for beat, arrived in beats]
        session.commit()
        return done
    except StaleState:
        session.rollback()
    alone: list[Beat] = []
    for beat, arrived in beats:
        try:
            alone.append(record(session, beat, arrived, grace))
        except StaleState:
            session.rollback()
            alone.append(Beat(known=True, changes=Changes()))
    return alone


def _record(session: Session, beat: Heartbeat, now: float, grace: float) -> Beat:
    """`record`'s writes, not committed."""
    conn = session.connection()
    if conn.execute(_SEEN, {"node": beat.name, "now": now}).rowcount != 1:
        return Beat(known=False, changes=Changes())  # unknown, or marked down
    reported = {(r.job_id, r.attempt) for r in beat.running}
    seen: list[int] = []
    listed: set[tuple[int, int]] = set()
    lost: list[int] = []
    for part in conn.execute(_LIVE_HERE, {"node": beat.name}):
        key = (part.job_id, part.attempt)
        if key in reported:
            seen.append(part.id)
            listed.add(key)
        elif gone(part.delivered, part.last_reported, now, grace, beat.work_through):
            lost.append(part.id)
    if seen:
        conn.execute(_REPORTED, {"ids": seen, "now": now})
    changes = Changes()
    for part_id in lost:
        lose = session.get(JobPart, part_id)
        job = session.get(Job, lose.job_id) if lose is not None else None
        if lose is not None and job is not None:
            why = f"node {beat.name} no longer runs it"
            changes.merge(lifecycle.part_lost(session, job, lose, now, why))
    unknown = reported - listed
    if unknown:
        unknown -= _ended_here(conn, beat.name, unknown)
    orphans = [RunningJobReport(job_id=j, attempt=a) for j, a in sorted(unknown)]
    return Beat(known=True, changes=changes, orphans=orphans)


def _ended_here(conn: Connection, node: str, runs: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Which of `runs` ended on `node` by its agent's own report: no stop order
    for those. The agent lists a run until the server acknowledges its exit, so
    a heartbeat built before that acknowledgement may be recorded after the
    exit; the stop order it would get is noise (and looks like a lost run)."""
    rows = conn.execute(_ENDED_HERE, {"node": node, "ids": sorted({j for j, _ in runs})})
    return {(r.job_id, r.attempt) for r in rows} & runs
