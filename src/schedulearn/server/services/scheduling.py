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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

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
)
from schedulearn.protocol import JobState, StopReason
from schedulearn.server.models import Allocation, Job, JobPart
from schedulearn.server.services import lifecycle, snapshot
from schedulearn.server.states import StaleState, transition
from schedulearn.server.wakeups import Changes

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PassResult:
    started: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    deferred: list[int] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)
    pending: int = 0
    running: int = 0


def _ledger(snap: snapshot.Snapshot) -> GpuLedger:
    """A ledger holding exactly what the database says is held."""
    bare = [
        type(n)(
            n.name,
            tuple(type(g)(g.index, g.type, g.uuid, g.memory_mb) for g in n.gpus),
            n.cpus,
            n.memory_gb,
            n.cpus,
            n.memory_gb,
            n.healthy,
        )
        for n in snap.view.nodes
    ]
    ledger = GpuLedger(bare)
    # Hold first on healthy terms, so checks pass: health is restored after.
    for node in bare:
        if not node.healthy:
            ledger.set_health(node.name, True)
    for job in snap.view.running:
        assert job.placement is not None
        _hold(ledger, job, job.placement)
    for i, ((job_id, _attempt), parts) in enumerate(snap.draining.items()):
        placement = Placement.of(parts)
        ghost = JobView(id=-(i + 1), submitted_at=0.0, gpus=placement.num_gpus, name=str(job_id))
        _hold(ledger, ghost, placement)
    for node in bare:
        if not node.healthy:
            ledger.set_health(node.name, False)
    return ledger


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


def run_pass(
    session: Session, policy: Policy, now: float, cache: snapshot.PendingCache | None = None
) -> PassResult:
    if not snapshot.could_change(session):
        return PassResult()
    snap = snapshot.build(session, now, cache)
    result = PassResult(pending=len(snap.view.pending), running=len(snap.view.running))
    if not snap.view.pending and not policy.tick_seconds:
        return result
    decisions = policy.decide(snap.view)
    if not decisions:
        return result
    live: list[Decision] = []
    for d in decisions:
        if isinstance(d, Resize):
            # Live resizing comes with live preemption/resume (a later issue).
            result.skipped.append(f"job {d.job_id}: resize is not supported live yet")
        else:
            live.append(d)
    decisions = check(_ledger(snap), live, snap.jobs, result)
    try:
        for d in decisions:
            job = session.get(Job, d.job_id)
            if job is None:
                continue
            if isinstance(d, Start):
                busy = [
                    f"{n}:{g}" for n, gpus in d.placement for g in gpus if (n, g) in snap.holders
                ]
                if busy:
                    # GPUs a preemption in this pass frees are still in use
                    # until the victim's process exits: start on a later pass.
                    result.deferred.append(d.job_id)
                    continue
                _start(session, job, d.placement, now, result)
            elif isinstance(d, Preempt):
                _preempt(session, job, now, result)
        session.commit()
    except (IntegrityError, StaleState) as exc:
        # Another writer got there first (a cancel, or another replica):
        # nothing of this pass was written; the next pass sees the new state.
        session.rollback()
        log.info("scheduling pass abandoned: %s", exc)
        return PassResult(pending=result.pending, running=result.running)
    return result


def _start(
    session: Session,
    job: Job,
    placement: Placement,
    now: float,
    result: PassResult,
) -> None:
    attempt = job.attempt + 1
    transition(
        session, job, JobState.ASSIGNED, now, "", attempt=attempt, placement=placement.as_dict()
    )
    # Rank 0 (the rendezvous master) is the part with the most GPUs.
    parts = sorted(placement, key=lambda p: (-len(p[1]), p[0]))
    for rank, (node, gpus) in enumerate(parts):
        for g in gpus:
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


def _preempt(session: Session, job: Job, now: float, result: PassResult) -> None:
    if job.state not in (JobState.RUNNING.value, JobState.ASSIGNED.value):
        return
    parts = lifecycle.live_parts(session, job.id or 0, job.attempt)
    transition(session, job, JobState.PREEMPTING, now, "preempted by the policy")
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
