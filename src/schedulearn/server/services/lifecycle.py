"""What happens to a job when one of its parts starts, exits, is stopped or lost.

Owns the rules that tie a job's parts (one per node; a gang has several)
to the job's state, through `server.states.transition`:

- a job runs once a part has started; it succeeds when every part of the
  current attempt has exited 0; one failing part fails the job and the
  other parts get a `gang_failed` stop order;
- a job being preempted returns to the queue when its last part exits,
  unless the agent saw its run end before the stop order reached it
  (`on_its_own`, a job of one part): then its exit stands, as if no
  preemption had begun; a resize or migration in flight
  (`Job.resume_kind`) keeps its target placement, and the GPUs of the
  target that were free are reserved for the next attempt (`Allocation`
  rows of attempt + 1) until it resumes;
- a part whose node died is lost: its GPUs are freed, the job becomes
  `lost` and is requeued (up to `max_restarts`, then failed) once the
  gang's other parts, sent a stop order, have exited; should the
  lost copy turn out to have exited on its own before the job runs again,
  that exit stands (`late_exit`);
- GPUs are released part by part, only when that part's process is gone
  (or its node is), so a GPU is never handed on while something runs on it.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any

from sqlalchemy import delete, select
from sqlmodel import Session, col

from schedulearn.protocol import OOM_MESSAGE_PREFIX, JobState, StopReason
from schedulearn.server.models import Allocation, Job, JobPart, PartStatus
from schedulearn.server.states import transition
from schedulearn.server.wakeups import Changes

LIVE = (PartStatus.ASSIGNED, PartStatus.RUNNING)


def live_parts(session: Session, job_id: int, attempt: int) -> list[JobPart]:
    return list(
        session.execute(
            select(JobPart).where(
                col(JobPart.job_id) == job_id,
                col(JobPart.attempt) == attempt,
                col(JobPart.status).in_(LIVE),
            )
        ).scalars()
    )


def free_part(session: Session, part: JobPart) -> None:
    session.execute(
        delete(Allocation).where(
            col(Allocation.node) == part.node,
            col(Allocation.job_id) == part.job_id,
            col(Allocation.attempt) == part.attempt,
        )
    )


def release_reservation(session: Session, job: Job) -> None:
    """Free the GPUs reserved for a resize or migration that will not happen."""
    session.execute(
        delete(Allocation).where(
            col(Allocation.job_id) == job.id,
            col(Allocation.attempt) == job.attempt + 1,
        )
    )


def _requeue_counter(job: Job) -> dict[str, int]:
    """Which counter a return to the queue after a stop order adds to."""
    if job.resume_kind == "migrate":
        return {"migrations": job.migrations + 1}
    if job.resume_kind == "resize":
        return {"resizes": job.resizes + 1}
    return {"preemptions": job.preemptions + 1}


def requeue_message(job: Job, agent_message: str) -> str:
    """What the job's history says when a stopped job goes back to the queue."""
    what = {"migrate": "migrating", "resize": "resizing"}.get(job.resume_kind or "", "preempted")
    # Stopped for another queue (`reclaims.notes`): keep saying who took the GPUs.
    said = job.message or ""
    if not job.preemptible and not job.resume_kind:
        if said.startswith("requeued: "):
            return said
        return "requeued; waiting to start again from the beginning"
    if not job.resume_kind and said.startswith("preempted: "):
        what = said
    where = ""
    if job.resume_placement:
        where = " to " + " ".join(
            f"{n}:{','.join(map(str, g))}" for n, g in sorted(job.resume_placement.items())
        )
    text = f"{what}{where}; waiting to resume"
    # The agent says whether it saved the checkpoint (or why it could not).
    if "checkpoint" in agent_message:
        text += " (" + agent_message[agent_message.find("checkpoint") :][:500] + ")"
    return text


def _accrue(job: Job, now: float) -> dict[str, float | None]:
    """Service counters to store when a run segment ends."""
    if job.started_at is None:
        return {}
    ran = max(0.0, now - job.started_at)
    held = sum(len(g) for g in (job.placement or {}).values())
    return {
        "service_seconds": job.service_seconds + ran,
        "attained_gpu_seconds": job.attained_gpu_seconds + ran * held,
    }


def stop_parts(
    parts: list[JobPart], reason: StopReason, changes: Changes, session: Session
) -> None:
    """Order the agents to stop these parts; a part never delivered just ends here."""
    for part in parts:
        if part.stop_reason is not None and part.stop_reason != StopReason.PREEMPT.value:
            continue
        if part.status == PartStatus.ASSIGNED and not part.delivered:
            part.status = PartStatus.EXITED
            free_part(session, part)
            changes.scheduler = True
        else:
            part.stop_reason = reason.value
            part.stop_sent = False
            changes.nodes.add(part.node)
        session.add(part)


def part_started(session: Session, job: Job, part: JobPart, now: float) -> Changes:
    changes = Changes(jobs={job.id or 0})
    if part.status == PartStatus.ASSIGNED:
        part.status = PartStatus.RUNNING
        part.last_reported = now
        session.add(part)
    if part.attempt == job.attempt and job.state == JobState.ASSIGNED.value:
        transition(session, job, JobState.RUNNING, now)
    return changes


def part_exited(
    session: Session,
    job: Job,
    part: JobPart,
    exit_code: int | None,
    now: float,
    failed_to_start: bool = False,
    message: str = "",
    siblings: list[JobPart] | None = None,
    on_its_own: bool = False,
) -> Changes:
    """`siblings`: the attempt's parts, when the caller has them loaded already;
    `on_its_own`: the agent saw the run end before any stop order reached it."""
    changes = Changes(scheduler=True, jobs={job.id or 0})
    if part.status not in LIVE:
        return changes
    part.status = PartStatus.EXITED
    part.exit_code = exit_code
    session.add(part)
    free_part(session, part)
    if part.attempt != job.attempt:
        return changes
    if siblings is None:
        siblings = live_parts(session, part.job_id, part.attempt)
    others = [p for p in siblings if p.id != part.id and p.status in LIVE]
    state = JobState(job.state)
    gang = " (one part of a gang)" if others or part.rank > 0 else ""
    # A run that ended before its stop order reached it: the preemption came
    # too late, and the exit is judged as any other (a run that got the order
    # and exited 0 may have saved and stopped, and is requeued below). Only a
    # job of one part: a gang's parts may each have got the order or not.
    too_late = state is JobState.PREEMPTING and on_its_own and len(job.placement or {}) <= 1
    if state in (JobState.ASSIGNED, JobState.RUNNING) or too_late:
        done: dict[str, Any] = _accrue(job, now)
        if too_late:
            # Moot once the job has ended: a resize or migration it was draining for.
            release_reservation(session, job)
            done.update(resume_placement=None, resume_kind=None)
        if failed_to_start or exit_code != 0:
            why = exit_why(part.node, exit_code, message, gang, failed_to_start)

            if others:
                why += "; stopping the other parts"
            transition(session, job, JobState.FAILED, now, why, exit_code=exit_code, **done)
            stop_parts(others, StopReason.GANG_FAILED, changes, session)
        elif not others:
            why = "ended on its own before its preemption took effect" if too_late else ""
            transition(session, job, JobState.SUCCEEDED, now, why, exit_code=0, **done)
    elif state is JobState.LOST and not others:  # a gang's last part after a loss
        _requeue_lost(session, job, now)
    elif state is JobState.PREEMPTING and not others:
        transition(
            session,
            job,
            JobState.PENDING,
            now,
            requeue_message(job, message),
            placement=None,
            started_at=None,
            **_requeue_counter(job),
            **_accrue(job, now),
        )
    return changes


def exit_why(
    node: str, exit_code: int | None, message: str, gang: str = "", failed_to_start: bool = False
) -> str:
    """Why a part that ended badly failed its job, as `show` and the history say it.

    A run the kernel's OOM killer ended in its memory limit says so ("out of
    memory: limit 8 GB (exit code 137 on n1)"), never the bare 137 the kill leaves."""
    if failed_to_start:
        return f"failed to start on {node}: {message}"
    if message.startswith(OOM_MESSAGE_PREFIX):
        return f"{message.split(';')[0]} (exit code {exit_code} on {node}{gang})"
    return f"exited with code {exit_code} on {node}{gang}"


class LossCause(StrEnum):
    """Why a part was lost: its node went down (not the job's doing), or the
    run vanished from a node that is still up."""

    NODE_DOWN = "node_down"
    RUN_VANISHED = "run_vanished"


# A job requeued this many times because its node went down is failed:
# the job itself may be what brings nodes down (it exhausts the host's memory).
MAX_NODE_LOSSES = 20


def part_lost(
    session: Session,
    job: Job,
    part: JobPart,
    now: float,
    why: str,
    cause: LossCause = LossCause.RUN_VANISHED,
) -> Changes:
    """The node under `part` died or no longer runs it: free it, requeue the job.

    A node going down is told apart from the job failing: it counts in
    `node_losses` (up to `MAX_NODE_LOSSES`), not against `max_restarts`,
    so a flaky or overloaded node does not fail the jobs it held.

    A gang's other parts get a stop order, and the job waits in `lost`
    until the last of them has exited (or been lost too) before it is
    requeued: a new attempt never runs beside a part of the old one."""
    changes = Changes(scheduler=True, jobs={job.id or 0})
    if part.status not in LIVE:
        return changes
    part.status = PartStatus.LOST
    session.add(part)
    free_part(session, part)
    if part.attempt != job.attempt:
        return changes
    others = [p for p in live_parts(session, part.job_id, part.attempt) if p.id != part.id]
    state = JobState(job.state)
    if state is JobState.LOST:  # a gang waiting for its other parts to stop
        if not others:
            _requeue_lost(session, job, now)
        return changes
    if state not in (JobState.ASSIGNED, JobState.RUNNING, JobState.PREEMPTING):
        return changes
    stop_parts(others, StopReason.LOST, changes, session)
    release_reservation(session, job)
    if cause is LossCause.NODE_DOWN:
        losses = (job.node_losses or 0) + 1
        counters, again = {"node_losses": losses}, losses <= MAX_NODE_LOSSES
        requeued = (
            f"requeued (its node went down: loss {losses} of at most {MAX_NODE_LOSSES}, "
            "not counted against max_restarts)"
        )
        refused = (
            f"not requeued: its node went down under it {losses} times; check what the job "
            "does to its host (memory, disk) before resubmitting"
        )
    else:
        again = job.restarts < job.max_restarts
        counters = {"restarts": job.restarts + 1} if again else {}
        requeued = f"requeued (restart {job.restarts + 1} of {job.max_restarts})"
        refused = (
            f"not requeued: it was lost {job.restarts + 1} times (max_restarts={job.max_restarts})"
        )
    waiting = f" once its other {len(others)} part(s) have stopped" if again and others else ""
    transition(
        session,
        job,
        JobState.LOST,
        now,
        f"{why}; {requeued}{waiting}" if waiting else why,
        resume_placement=None,
        resume_kind=None,
        **counters,
        **_accrue(job, now),
    )
    if not again:
        transition(session, job, JobState.FAILED, now, f"{why}; {refused}")
    elif not others:
        _requeue_lost(session, job, now, f"{why}; {requeued}")
    return changes


def _requeue_lost(session: Session, job: Job, now: float, message: str = "") -> None:
    transition(
        session,
        job,
        JobState.PENDING,
        now,
        message or f"the other parts of attempt {job.attempt} have stopped; requeued",
        placement=None,
        started_at=None,
    )


def late_exit(
    session: Session, job: Job, part: JobPart, exit_code: int | None, at: float, now: float
) -> Changes | None:
    """A written-off (`lost`) part's exit, reported once its agent is back.

    The copy ended on its own while its node was out of touch (the agent
    does not report a run its lease stopped). If the job has not run again
    yet (pending at that attempt, or assigned its next one but not yet sent
    it to any agent: a returning agent reports before it asks for work),
    the exit stands: the job succeeds or fails as it would have, the unsent
    assignment is dropped, and it does not run a second time. Not for a
    gang (its other parts were stopped under it). None when it is too
    late or not that case; the caller then refuses the report."""
    if part.status != PartStatus.LOST:
        return None
    state = JobState(job.state)
    if state is JobState.PENDING and job.attempt == part.attempt:
        unsent: list[JobPart] = []
    elif state is JobState.ASSIGNED and job.attempt == part.attempt + 1:
        unsent = live_parts(session, job.id or 0, job.attempt)
        if any(p.delivered or p.status != PartStatus.ASSIGNED for p in unsent):
            return None
    else:
        return None
    gang = session.execute(
        select(col(JobPart.id)).where(
            col(JobPart.job_id) == part.job_id,
            col(JobPart.attempt) == part.attempt,
            col(JobPart.id) != part.id,
        )
    ).first()
    if gang is not None:
        return None
    changes = Changes(scheduler=True, jobs={job.id or 0})
    stop_parts(unsent, StopReason.CANCEL, changes, session)  # never sent: they just end
    part.status = PartStatus.EXITED
    part.exit_code = exit_code
    session.add(part)
    ended = time.strftime("%H:%M:%S", time.localtime(at))
    why = (
        f"exited with code {exit_code} on {part.node} at {ended}, while the node was out of "
        "touch; reported when its agent came back, before the job ran again: the exit "
        "stands, the requeued job does not run a second time"
    )
    transition(
        session,
        job,
        JobState.SUCCEEDED if exit_code == 0 else JobState.FAILED,
        now,
        why,
        exit_code=exit_code,
        attempt=part.attempt,
        placement={part.node: part.gpus},
    )
    return changes


def time_out(session: Session, job: Job, now: float, why: str) -> Changes:
    """End a job at its time limit: `timeout` now, and a running one's parts get
    a stop order (the agent sends SIGTERM, then SIGKILL after the grace)."""
    changes = Changes(scheduler=True, jobs={job.id or 0})
    parts = live_parts(session, job.id or 0, job.attempt)
    release_reservation(session, job)
    transition(session, job, JobState.TIMEOUT, now, why, **_accrue(job, now))
    stop_parts(parts, StopReason.CANCEL, changes, session)
    return changes


def cancel(session: Session, job: Job, now: float, by: str, why: str | None = None) -> Changes:
    """Cancel a job in any unfinished state; running parts get a stop order.
    `why`: the job's message, when not "cancelled by `by`"."""
    changes = Changes(scheduler=True, jobs={job.id or 0})
    state = JobState(job.state)
    parts = live_parts(session, job.id or 0, job.attempt) if state.holds_gpus else []
    release_reservation(session, job)
    transition(
        session,
        job,
        JobState.CANCELLED,
        now,
        why or f"cancelled by {by}",
        resume_placement=None,
        resume_kind=None,
        **_accrue(job, now),
    )
    stop_parts(parts, StopReason.CANCEL, changes, session)
    return changes
