"""One scheduling pass: snapshot -> policy -> ledger check -> one transaction.

Owns how a policy's decisions reach the database. The pass reads a
`ClusterView` from the database, asks the policy in force, and checks
the decisions with `core.GpuLedger` (the simulator's rules: no GPU
twice, gangs all-or-nothing, sizes, types, CPUs and memory). It then
writes them in one transaction: each started job moves to `assigned`
and gets one `Allocation` row per GPU (their primary key makes a double
booking impossible even with several writers) and one `JobPart` per
node; each preempted job moves to `preempting` and its parts get a
preempt stop order.

A pass is three steps, `prepare` (the reads), `decide` (pure: the policy
and the ledger) and `apply` (the writes); `run_pass` runs them in one go.
The live scheduler runs `decide` off the database thread, so requests
commit between the read and the write: `apply` checks every row again
and leaves a start whose job changed or whose node closed meanwhile to
the next pass (`Prepared.queued`).

A `Resize` (grow, shrink, or a migration: the same size elsewhere; a
`Preempt` and a `Start` of one job in one pass mean the same) goes
through checkpoint and restart: the job is stopped like a preempted one,
remembers its target placement (`Job.resume_placement`), and the GPUs of
the target that are free now are reserved for its next attempt. Once its
last part has exited (and its checkpoint is safe), `resume` starts it on
that placement at the head of the next pass, before the policy runs; if
the target is no longer usable (a node went down) the reservation is
dropped and the job waits in the queue like any other.

Defence in depth: whatever a policy asks, a job not marked preemptible
is never preempted, moved or resized (the ledger refuses it, and the
writers below check the row again), with one exception under tenant
queues: a non-preemptible job that borrowed GPUs beyond its queue's
guarantee is requeued, to start again, when the lender takes them back
(`Preempt.reclaimed_by`, which the ledger allows; `reclaims` writes the
history line that names who took them).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import Session, col

from schedulearn.collector import collector_held
from schedulearn.core import (
    Decision,
    GpuLedger,
    InvalidDecision,
    JobView,
    Placement,
    Policy,
    Preempt,
    Resize,
    Start,
    eligibility,
)
from schedulearn.core.views import ClusterView, rebuild
from schedulearn.protocol import JobState, StopReason
from schedulearn.server.bulk import execute_many
from schedulearn.server.models import Allocation, Job, JobPart, Node, PartStatus
from schedulearn.server.services import (
    dependencies,
    lifecycle,
    live_views,
    queues,
    reclaims,
    snapshot,
)
from schedulearn.server.states import StaleState, Step, transition, transition_many
from schedulearn.server.wakeups import Changes

log = logging.getLogger(__name__)


# A job a pass starts: its id, the attempt it is on and its state.
_Decided = tuple[int, int, JobState]
# A pass's writes, built once (`bulk.execute_many`).
_ADD_ALLOCATION = Allocation.__table__.insert()
_ADD_PART = JobPart.__table__.insert()


@dataclass(slots=True)
class PassResult:
    started: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    resized: list[int] = field(default_factory=list)
    resumed: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    deferred: list[int] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)
    pending: int = 0
    running: int = 0


def ledger_for(snap: snapshot.Snapshot, view: ClusterView | None = None) -> GpuLedger:
    """A ledger holding exactly what the database says is held, on the nodes of
    `view` (the snapshot's own by default; the pass's marks drained nodes down)."""
    view = view or snap.view
    # Every node with its GPUs free; every other field (capabilities, and
    # any declared later) copied by name.
    bare = [
        rebuild(
            n,
            gpus=tuple(type(g)(g.index, g.type, g.uuid, g.memory_mb) for g in n.gpus),
            free_cpus=n.cpus,
            free_memory_gb=n.memory_gb,
        )
        for n in view.nodes
    ]
    ledger = GpuLedger(bare)
    # Hold first on healthy terms, so checks pass: health is restored after.
    for node in bare:
        if not node.healthy:
            ledger.set_health(node.name, True)
    for job in snap.view.running:
        assert job.placement is not None
        held = still_held(job, job.placement, snap.holders)
        if held is job.placement:
            _hold(ledger, job, held)
        else:
            # A gang whose other parts run on: held as big as what it still holds.
            _hold(ledger, rebuild(job, gpus=held.num_gpus, min_gpus=None, max_gpus=None), held)
    for i, ((job_id, _attempt), parts) in enumerate(snap.draining.items()):
        placement = Placement.of(parts)
        ghost = JobView(id=-(i + 1), submitted_at=0.0, gpus=placement.num_gpus, name=str(job_id))
        _hold(ledger, ghost, placement)
    for node in bare:
        if not node.healthy:
            ledger.set_health(node.name, False)
    return ledger


def still_held(
    job: JobView, placement: Placement, holders: dict[tuple[str, int], tuple[int, int]]
) -> Placement:
    """The part of `placement` whose GPUs `job` still holds in the database.

    A gang frees each node's GPUs as that part exits, while the job runs on
    until its last part ends; the nodes the policy sees show those GPUs free
    (from the holders), so the ledger that checks the pass must hold only
    what is still held, or it refuses the pass that uses them (issue 36: a
    refusal a few passes a minute at 300 nodes, each pass then checked
    decision by decision). A placement none of whose GPUs is held (rows from
    before every run had its GPUs written) is held whole, as before."""
    kept: dict[str, list[int]] = {}
    for node, gpus in placement:
        mine = [g for g in gpus if (holders.get((node, g)) or (None,))[0] == job.id]
        if mine:
            kept[node] = mine
    count = sum(len(g) for g in kept.values())
    if count == 0 or count == placement.num_gpus:
        return placement
    return Placement.of(kept)


def _hold(ledger: GpuLedger, job: JobView, placement: Placement) -> None:
    try:
        ledger.apply([Start(job.id, placement)], {job.id: job})
    except InvalidDecision as exc:
        # The database is the authority on what is held; a resource figure
        # that no longer fits (a node re-registered smaller) must not stop
        # the pass. Hold the GPUs without the CPU/memory check.
        log.warning("holding job %s despite: %s", job.id, exc)
        relaxed = JobView(id=job.id, submitted_at=0.0, gpus=placement.num_gpus)
        ledger.apply([Start(job.id, placement)], {job.id: relaxed})


def check(
    ledger: GpuLedger, decisions: list[Decision], jobs: dict[int, JobView], result: PassResult
) -> list[Decision]:
    """The decisions the ledger accepts: all of them, or each valid one alone."""
    try:
        ledger.apply(decisions, jobs)
        return decisions
    except InvalidDecision as exc:
        log.warning("policy pass refused by the ledger (%s); applying its valid decisions", exc)
    kept: list[Decision] = []
    for d in decisions:
        try:
            ledger.apply([d], jobs)
            kept.append(d)
        except InvalidDecision as exc:
            result.skipped.append(str(exc))
    return kept


def as_moves(decisions: list[Decision]) -> list[Decision]:
    """A `Preempt` and a `Start` of the same job in one pass is a move: a `Resize`."""
    preempted = {d.job_id for d in decisions if isinstance(d, Preempt)}
    starts = {d.job_id: d for d in decisions if isinstance(d, Start) and d.job_id in preempted}
    if not starts:
        return decisions
    out: list[Decision] = []
    for d in decisions:
        if isinstance(d, Preempt) and d.job_id in starts:
            out.append(Resize(d.job_id, starts[d.job_id].placement))
        elif not (isinstance(d, Start) and d.job_id in starts):
            out.append(d)
    return out


@dataclass(slots=True)
class Prepared:
    """A pass read from the database, for the policy to decide (`prepare`)."""

    snap: snapshot.Snapshot
    result: PassResult
    # Each queued job's `queued_at` as the pass read it, when other writers may
    # commit between the read and the write (`decide` off the database
    # thread): `apply` then leaves a job changed meanwhile for the next pass.
    # None: read, decided and written in one go.
    queued: dict[int, float] | None = None


def run_pass(
    session: Session,
    policy: Policy,
    now: float,
    cache: snapshot.PendingCache | live_views.Kept | None = None,
) -> PassResult:
    """One pass in one go: `prepare`, `decide`, `apply`."""
    prepared = prepare(session, policy, now, cache)
    if isinstance(prepared, PassResult):
        return prepared
    return apply(session, prepared, decide(prepared, policy), now)


def prepare(
    session: Session,
    policy: Policy,
    now: float,
    cache: snapshot.PendingCache | live_views.Kept | None = None,
) -> Prepared | PassResult:
    """A pass's reads (and the resumes and settled dependencies it commits
    first); a `PassResult` when there is nothing for the policy to decide."""
    resumed = resume(session, now)
    # Jobs whose dependency can never be met end now, whatever the GPUs.
    dependencies.settle(session, now)
    # Under tenant queues a reclaim may requeue a non-preemptible borrower,
    # so a full cluster with no preemptible job can still change.
    tenanted = queues.declared(session)
    if not tenanted and not snapshot.could_change(session):
        return resumed
    goodput = getattr(policy, "uses_goodput", False)
    snap = snapshot.build(session, now, cache, goodput, stopping_as_running=tenanted)
    result = PassResult(pending=len(snap.view.pending), running=len(snap.view.running))
    result.resumed, result.started, result.nodes = resumed.resumed, resumed.started, resumed.nodes
    if not snap.view.pending and not policy.tick_seconds:
        return result
    return Prepared(snap, result)


def decide(prepared: Prepared, policy: Policy) -> list[Decision]:
    """The policy's decisions the ledger accepts. Pure (no database): the
    scheduler runs it off the database thread, which serves requests meanwhile."""
    snap = prepared.snap
    # The collector runs after the pass, not in bursts inside it (`collector`).
    with collector_held():
        # Held jobs, array limits and drained nodes: the same for every policy.
        view = eligibility.schedulable(snap.view)
        decisions = policy.decide(view)
    if not decisions:
        return []
    return check(ledger_for(snap, view), as_moves(decisions), snap.jobs, prepared.result)


def apply(
    session: Session, prepared: Prepared, decisions: list[Decision], now: float
) -> PassResult:
    """Write `decisions` in one transaction, each row checked again: a job
    that moved on since the read (`transition`'s conditional writes) abandons
    the pass; with `prepared.queued`, a start whose job was changed meanwhile
    (held, updated: a new `queued_at`) or whose node went down, was drained
    or removed waits for the next pass."""
    snap, result = prepared.snap, prepared.result
    if not decisions:
        return result
    # Each job stopped for another queue says who took its GPUs back.
    lines = reclaims.notes(decisions, snap.jobs)
    # A start needs only the job's attempt and state: one plain read for all of
    # them. Preemptions and resizes work on ORM jobs, loaded in one query;
    # `session.get` then finds each in the session (held here: the session
    # keeps its objects only weakly).
    ids = [d.job_id for d in decisions]
    rows: list[Any] = list(session.connection().execute(_DECIDED, {"ids": ids}))
    decided = {job_id: (attempt, JobState(state)) for job_id, attempt, state, _ in rows}
    moved: set[int] = set()
    if prepared.queued is not None:
        now_queued = {job_id: queued_at for job_id, _, _, queued_at in rows}
        moved = _moved_since(session, prepared.queued, decisions, decided, now_queued)
    others = [d.job_id for d in decisions if not isinstance(d, Start) and d.job_id in decided]
    held: Sequence[Job] = ()
    if others:
        held = session.execute(select(Job).where(col(Job.id).in_(others))).scalars().all()
    starts: list[tuple[_Decided, Placement]] = []
    try:
        for d in decisions:
            if d.job_id not in decided:
                continue  # gone since the snapshot
            if isinstance(d, Start):
                busy = [
                    f"{n}:{g}" for n, gpus in d.placement for g in gpus if (n, g) in snap.holders
                ]
                if busy or d.job_id in moved:
                    # GPUs a preemption in this pass frees are still in use
                    # until the victim's process exits: start on a later pass.
                    result.deferred.append(d.job_id)
                    continue
                starts.append(((d.job_id, *decided[d.job_id]), d.placement))
                continue
            job = session.get(Job, d.job_id)
            if job is None:
                continue
            if isinstance(d, Preempt):
                requeue = d.reclaimed_by is not None
                _preempt(session, job, now, result, lines.get(d.job_id), requeue)
            elif isinstance(d, Resize):
                resize(session, job, d.placement, now, result, snap.holders)
        _start_many(session, starts, now, result)
        session.commit()
        del held
    except (IntegrityError, StaleState) as exc:
        # Another writer got there first (a cancel, or another replica):
        # nothing of this pass was written; the next pass sees the new state.
        session.rollback()
        log.info("scheduling pass abandoned: %s", exc)
        return PassResult(pending=result.pending, running=result.running)
    return result


def _moved_since(
    session: Session,
    queued: dict[int, float],
    decisions: list[Decision],
    decided: dict[int, tuple[int, JobState]],
    now_queued: dict[int, float],
) -> set[int]:
    """The jobs to start that changed since the pass read them (no longer
    pending; a hold, an update, a requeue give a job a new `queued_at`), or
    whose placement names a node that is down, drained or removed now."""
    starts = [d for d in decisions if isinstance(d, Start) and d.job_id in decided]
    if not starts:
        return set()
    named = sorted({n for d in starts for n, _gpus in d.placement})
    open_ = {
        name
        for name, healthy, drained in session.connection().execute(_NODE_OPEN, {"names": named})
        if healthy and not drained
    }
    return {
        d.job_id
        for d in starts
        if decided[d.job_id][1] is not JobState.PENDING
        or queued.get(d.job_id) != now_queued.get(d.job_id)
        or any(n not in open_ for n, _gpus in d.placement)
    }


def _start(
    session: Session,
    job: Job,
    placement: Placement,
    now: float,
    result: PassResult,
    reserved: frozenset[tuple[str, int]] = frozenset(),
    message: str = "",
) -> None:
    attempt = job.attempt + 1
    transition(
        session,
        job,
        JobState.ASSIGNED,
        now,
        message,
        attempt=attempt,
        placement=placement.as_dict(),
        resume_placement=None,
        resume_kind=None,
    )
    # Rank 0 (the rendezvous master) is the part with the most GPUs.
    parts = sorted(placement, key=lambda p: (-len(p[1]), p[0]))
    for rank, (node, gpus) in enumerate(parts):
        for g in gpus:
            if (node, g) in reserved:
                continue  # already held for this attempt since the resize began
            session.add(Allocation(node=node, gpu_index=g, job_id=job.id or 0, attempt=attempt))
        session.add(
            JobPart(
                job_id=job.id or 0,
                attempt=attempt,
                node=node,
                rank=rank,
                gpus=list(gpus),
                last_reported=now,
            )
        )
        result.nodes.add(node)
    result.started.append(job.id or 0)


def _parts_of(placement: Placement) -> list[tuple[str, tuple[int, ...]]]:
    """The parts in rank order: rank 0 (the rendezvous master) has the most GPUs."""
    return sorted(((n, tuple(g)) for n, g in placement), key=lambda p: (-len(p[1]), p[0]))


def _start_many(
    session: Session, starts: list[tuple[_Decided, Placement]], now: float, result: PassResult
) -> None:
    """`_start` for every job a pass starts, set-based: the jobs' moves in one
    UPDATE (`transition_many`), their GPUs in one INSERT, their parts in one."""
    if not starts:
        return
    steps: list[Step] = []
    allocations: list[dict[str, object]] = []
    parts: list[dict[str, object]] = []
    for (job_id, last_attempt, state), placement in starts:
        attempt = last_attempt + 1
        fields = {
            "attempt": attempt,
            "placement": placement.as_dict(),
            "resume_placement": None,
            "resume_kind": None,
        }
        steps.append(Step(job_id, attempt, state, JobState.ASSIGNED, now, "", fields))
        for rank, (node, gpus) in enumerate(_parts_of(placement)):
            allocations += [
                {"node": node, "gpu_index": g, "job_id": job_id, "attempt": attempt} for g in gpus
            ]
            parts.append(
                {
                    "job_id": job_id,
                    "attempt": attempt,
                    "node": node,
                    "rank": rank,
                    "gpus": list(gpus),
                    "status": PartStatus.ASSIGNED,
                    "delivered": False,
                    "stop_reason": None,
                    "stop_sent": False,
                    "exit_code": None,
                    "last_reported": now,
                }
            )
            result.nodes.add(node)
        result.started.append(job_id)
    transition_many(session, steps)
    conn = session.connection()
    execute_many(conn, _ADD_ALLOCATION, allocations)  # none when no start needs a GPU
    execute_many(conn, _ADD_PART, parts)
    for step in steps:
        # A copy of the job the session holds (a resume may have loaded it) is
        # kept true to the row: nothing is left to flush.
        held = session.identity_map.get(Session.identity_key(Job, step.job_id))
        if held is None:
            continue
        for key, value in {**step.fields, "state": JobState.ASSIGNED.value}.items():
            set_committed_value(held, key, value)


def _refuse_unpreemptible(job: Job, verb: str, result: PassResult) -> bool:
    if job.preemptible:
        return False
    # The ledger refuses this already; a policy bug must never get this far.
    result.skipped.append(f"job {job.id} is not preemptible and cannot be {verb}")
    return True


def _preempt(
    session: Session,
    job: Job,
    now: float,
    result: PassResult,
    message: str | None = None,
    requeue: bool = False,
) -> None:
    """Stop `job` for the policy; `requeue`: a fair-share reclaim
    (`Preempt.reclaimed_by`), which may stop a non-preemptible borrower (it
    then starts again from the beginning)."""
    if job.state not in (JobState.RUNNING.value, JobState.ASSIGNED.value):
        return
    if not requeue and _refuse_unpreemptible(job, "preempted", result):
        return
    parts = lifecycle.live_parts(session, job.id or 0, job.attempt)
    transition(session, job, JobState.PREEMPTING, now, message or "preempted by the policy")
    changes = Changes()
    lifecycle.stop_parts(parts, StopReason.PREEMPT, changes, session)
    result.nodes |= changes.nodes
    if not lifecycle.live_parts(session, job.id or 0, job.attempt):
        # Nothing had reached an agent yet: it is back in the queue at once.
        transition(
            session,
            job,
            JobState.PENDING,
            now,
            "preempted before it started",
            placement=None,
            started_at=None,
            preemptions=job.preemptions + 1,
        )
    result.preempted.append(job.id or 0)


def resize(
    session: Session,
    job: Job,
    placement: Placement,
    now: float,
    result: PassResult,
    holders: dict[tuple[str, int], tuple[int, int]],
) -> None:
    """Stop `job` (checkpoint and exit) to restart it on `placement`."""
    if job.state not in (JobState.RUNNING.value, JobState.ASSIGNED.value):
        return
    old = Placement.of(job.placement or {})
    kind = "migrate" if placement.num_gpus == old.num_gpus else "resize"
    if _refuse_unpreemptible(job, "moved" if kind == "migrate" else "resized", result):
        return
    if placement == old:
        return
    what = (
        f"migrating from {old} to {placement}"
        if kind == "migrate"
        else f"resizing from {old.num_gpus} to {placement.num_gpus} GPUs ({placement})"
    )
    parts = lifecycle.live_parts(session, job.id or 0, job.attempt)
    transition(
        session,
        job,
        JobState.PREEMPTING,
        now,
        f"{what}, by the policy",
        resume_placement=placement.as_dict(),
        resume_kind=kind,
    )
    # Hold the target's free GPUs for the next attempt; the job's own GPUs
    # are held by its current attempt until its process is gone.
    for node, gpus in placement:
        for g in gpus:
            if (node, g) not in holders:
                session.add(
                    Allocation(node=node, gpu_index=g, job_id=job.id or 0, attempt=job.attempt + 1)
                )
    changes = Changes()
    lifecycle.stop_parts(parts, StopReason.PREEMPT, changes, session)
    result.nodes |= changes.nodes
    if not lifecycle.live_parts(session, job.id or 0, job.attempt):
        transition(
            session,
            job,
            JobState.PENDING,
            now,
            lifecycle.requeue_message(job, ""),
            placement=None,
            started_at=None,
            **({"migrations": job.migrations + 1} if kind == "migrate" else {}),
            **({"resizes": job.resizes + 1} if kind == "resize" else {}),
        )
    result.resized.append(job.id or 0)


# Built once: every pass that starts a job reads them.
_DECIDED = select(col(Job.id), col(Job.attempt), col(Job.state), col(Job.queued_at)).where(
    col(Job.id).in_(bindparam("ids", expanding=True))
)
# Only the nodes the starts name: a pass at 1,000 nodes starts on few of them.
_NODE_OPEN = select(col(Node.name), col(Node.healthy), col(Node.drained)).where(
    col(Node.name).in_(bindparam("names", expanding=True))
)

# Built once; the state is a bound parameter from the enum, not a literal.
_ANY_RESUMING = (
    select(col(Job.id))
    .where(col(Job.state) == JobState.PENDING, col(Job.resume_kind) != None)  # noqa: E711
    .limit(1)
)


def resume(session: Session, now: float) -> PassResult:
    """Start the jobs whose resize or migration has drained, on their target placement."""
    result = PassResult()
    # Every pass asks, and hardly ever is one waiting: a plain read first.
    if session.connection().execute(_ANY_RESUMING).first() is None:
        return result
    waiting = (
        session.execute(
            select(Job)
            .where(col(Job.state) == JobState.PENDING.value, col(Job.resume_kind) != None)  # noqa: E711
            .order_by(col(Job.queued_at), col(Job.id))
        )
        .scalars()
        .all()
    )
    if not waiting:
        return result
    nodes, holders, _ = snapshot.load_nodes(session)
    usable = {(n.name, g.index) for n in nodes if n.healthy for g in n.gpus}
    try:
        for job in waiting:
            placement = Placement.of(job.resume_placement or {})
            mine = (job.id or 0, job.attempt + 1)
            wanted = [(n, g) for n, gpus in placement for g in gpus]
            reserved = frozenset(k for k in wanted if holders.get(k) == mine)
            blocked = [
                f"{n}:{g}"
                for n, g in wanted
                if (n, g) not in usable or holders.get((n, g)) not in (None, mine)
            ]
            if blocked or placement.num_nodes == 0:
                lifecycle.release_reservation(session, job)
                session.execute(
                    update(Job)
                    .where(Job.id == job.id)
                    .values(resume_placement=None, resume_kind=None)
                )
                log.info(
                    "job %s cannot resume on %s (%s unavailable); it waits in the queue",
                    job.id,
                    placement,
                    ", ".join(blocked),
                )
                continue
            what = "migrated" if job.resume_kind == "migrate" else "resized"
            _start(
                session,
                job,
                placement,
                now,
                result,
                reserved=reserved,
                message=f"{what}: resumes on {placement}",
            )
            for k in wanted:
                holders[k] = mine
            result.resumed.append(job.id or 0)
        session.commit()
    except (IntegrityError, StaleState) as exc:
        session.rollback()
        log.info("resuming moved jobs abandoned: %s", exc)
        return PassResult()
    return result
