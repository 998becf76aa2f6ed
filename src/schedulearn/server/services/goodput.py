"""Goodput, live: what adaptive jobs report, turned into `ClusterView.goodput`.

Owns the `goodput_state` table. A job that adapts its batch
(`runtime.AdaptiveBatch`) sends a `core.goodput.GoodputReport` with its
progress reports (`ProgressReport.goodput`): its batch limits, the
configuration it runs, the mean step time there, its gradient statistics
and its progress towards its target. `record` (called where progress
arrives, `services.progress.record`) keeps the newest report and one
measured step per (nodes, GPUs, local batch), over all of the job's
attempts: that is what the core model is fitted from. `load` gives the
scheduler a `core.goodput.JobGoodput` per waiting or running job that
reported, for policies that ask for it (`uses_goodput`, the `goodput`
policy). A job that reported its limits but no step yet gets the core
model's prior (no samples: linear speedup, relative units); a job that
never reported is left out, and the policy uses its own prior for it
(linear speedup over the estimated duration, when there is one). The
work a job has left is what it declared, or else what was learnt from
ended jobs like it, or unknown: `services.goodput_work` states the rule.

`prune` (called with the scheduler's other periodic clean-ups) deletes
the rows of jobs that have ended: nothing reads them then, and a busy
cluster would otherwise keep one row per job it ever ran. A report that
arrives after its job ended makes a row again, which the next prune
removes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlmodel import Session, col

from schedulearn.core.goodput import GoodputReport, JobGoodput, StepSample
from schedulearn.protocol import JobState, ProgressReport
from schedulearn.server.models import GoodputState, Job
from schedulearn.server.services.goodput_work import Owner, WorkSource, learn_totals, work_left

log = logging.getLogger(__name__)

# Distinct configurations kept per job (the newest win): a job tries few.
MAX_SAMPLES = 64
_ACTIVE = (JobState.PENDING, JobState.ASSIGNED, JobState.RUNNING)


def record(session: Session, job_id: int, reports: Sequence[ProgressReport]) -> None:
    """Keep the goodput part of a batch of reports (no commit: the caller's)."""
    rated = sorted((r for r in reports if r.goodput is not None), key=lambda r: r.at)
    if not rated:
        return
    row = session.get(GoodputState, job_id)
    samples: dict[tuple[int, int, int], list[float]] = {}
    if row is not None:
        samples = {(s[0], s[1], s[2]): [s[3], s[4]] for s in row.samples}
    for r in rated:
        assert r.goodput is not None
        sample = r.goodput.sample()
        if sample is not None:
            key = (sample.nodes, sample.replicas, sample.atomic_bsz)
            samples.pop(key, None)  # re-inserted last: the newest are kept
            samples[key] = [sample.step_time, sample.sync_time]
    kept = [[*k, *v] for k, v in list(samples.items())[-MAX_SAMPLES:]]
    newest = rated[-1]
    assert newest.goodput is not None
    if row is None:
        row = GoodputState(job_id=job_id, at=newest.at, report={}, samples=[])
        session.add(row)
    if not row.report or row.at <= newest.at:
        row.at = newest.at
        row.report = dataclasses.asdict(newest.goodput)
    row.samples = kept


def load(session: Session) -> dict[int, JobGoodput]:
    """A `JobGoodput` for every waiting or running job that reported one; its
    work left by the information rule (`services.goodput_work`) and nothing else."""
    rows = session.connection().execute(
        select(
            col(GoodputState.job_id),
            col(GoodputState.report),
            col(GoodputState.samples),
            col(Job.preemptions),
            col(Job.resizes),
            col(Job.migrations),
            col(Job.user),
            col(Job.name),
            col(Job.command),
            col(Job.progress),
        )
        .join(Job, col(Job.id) == col(GoodputState.job_id))
        .where(col(Job.state).in_(_ACTIVE))
    )
    parsed: list[tuple[int, GoodputReport, tuple[StepSample, ...], int, Owner, Any]] = []
    for row in rows:
        job_id, report, samples, preemptions, resizes, migrations = row[:6]
        user, name, command, progress = row[6:]
        try:
            latest = GoodputReport(**report)
            measured = tuple(
                StepSample(int(n), int(r), int(a), float(t), float(s))
                for n, r, a, t, s in sorted(samples)
            )
        except (TypeError, ValueError) as exc:
            # Stored by an older release, say: the job falls back to the prior.
            log.warning("job %s: goodput report not usable (%s)", job_id, exc)
            continue
        owner = Owner(user, name or "", command, latest.init_batch)
        restarts = preemptions + resizes + migrations
        parsed.append((job_id, latest, measured, restarts, owner, progress))
    # Totals are learnt only for jobs that declared none (one query, when some did not).
    undeclared = {o.user for _, r, _, _, o, said in parsed if work_left(r, None, said) is None}
    learned = learn_totals(session, undeclared) if undeclared else None
    out: dict[int, JobGoodput] = {}
    for job_id, latest, measured, restarts, owner, progress in parsed:
        total = learned.total(owner) if learned is not None else None
        left = work_left(latest, total, progress)
        out[job_id] = JobGoodput(
            latest.limits(),
            measured,
            latest.grad_sqr,
            latest.grad_var,
            None if left is None else left.steps,
            restarts,
            latest.progress,
            # As in the simulator (`JobGoodput.of_report`): the policy weighs a
            # pass with a learned total by `fairness_learned`.
            left is not None and left.source is WorkSource.LEARNED,
        )
    return out


def prune(session: Session, most: int = 1000) -> int:
    """Delete the rows of up to `most` jobs that have ended (or are gone), and
    commit; how many. A preempted or lost job goes back to waiting: it keeps them."""
    final = [s.value for s in JobState if s.is_final]
    live = (
        select(col(Job.id))
        .where(col(Job.id) == col(GoodputState.job_id), col(Job.state).not_in(final))
        .exists()
    )
    gone = list(
        session.connection()
        .execute(select(col(GoodputState.job_id)).where(~live).limit(most))
        .scalars()
    )
    if gone:
        session.execute(delete(GoodputState).where(col(GoodputState.job_id).in_(gone)))
        session.commit()
    return len(gone)
