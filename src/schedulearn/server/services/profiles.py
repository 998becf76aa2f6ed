"""Throughput profiles, live: what running jobs report and what an admin imports.

Owns the `throughput_profile` table: one row per (model, batch size, GPU
type, GPU count, spread over servers), with the speed in training steps
per second (samples/s over the batch size; samples/s itself when the
batch size is unknown — relative speeds between GPU types, which is
what placement uses, do not depend on the unit).

- `record_throughput`: called where progress reports arrive
  (`services.progress.record`). A report's samples/s counts for the
  job's model on the GPUs it holds now: a job must name its `model`
  (the batch size may be part of it, e.g. "ResNet-50 (batch size 64)"
  or "resnet50 bs=64") and run on typed GPUs. Reports of one job are
  smoothed (exponential average); a new job's measurement replaces an
  older one's, as in `core.throughput.ProfileTable`.
- `import_profiles`: a batch of profiles (the CLI reads Gavel's JSON).
- `load_table`: the table as a `core.throughput.ProfileTable`;
  `live_table`: Schedulearn's built-in Gavel table with the stored
  profiles on top (a stored profile replaces the built-in one of the
  same key), which the live scheduler and the forecasts hand to any
  policy with a `profiles` option (`similarity`) whose spec does not
  name a table itself (`policy_overrides`); `mark` tells them when the
  stored profiles changed.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import func, select
from sqlmodel import Session, col

from schedulearn.core.estimator import builtin_table
from schedulearn.core.registry import UnknownPolicyError, options_of, parse_spec
from schedulearn.core.throughput import ProfileTable, ThroughputProfile, parse_model
from schedulearn.protocol import (
    ProfileImport,
    ProfileImportReply,
    ProfileList,
    ProfilePublic,
)
from schedulearn.server.errors import BadRequest
from schedulearn.server.models import Gpu, Job, ThroughputRecord

# Weight of a new report in the running average of one job's reports.
SMOOTHING = 0.3
# The policy option that takes a profile table.
OPTION = "profiles"
# Updates of existing profiles reach the live policy at most this often.
REFRESH_SECONDS = 60.0


def _public(row: ThroughputRecord) -> ProfilePublic:
    return ProfilePublic(
        model=row.model,
        batch_size=row.batch_size or None,
        gpu_type=row.gpu_type,
        gpu_count=row.gpu_count,
        spread=row.spread,
        steps_per_sec=row.steps_per_sec,
        samples_per_sec=row.samples_per_sec,
        source=row.source,
        reports=row.reports,
        updated_at=row.updated_at,
    )


def _upsert(
    session: Session,
    key: tuple[str, int, str, int, bool],
    steps: float,
    samples: float | None,
    source: str,
    at: float,
    smooth: bool,
) -> ThroughputRecord:
    row = session.get(ThroughputRecord, key)
    if row is None:
        model, batch, gpu_type, count, spread = key
        row = ThroughputRecord(
            model=model,
            batch_size=batch,
            gpu_type=gpu_type,
            gpu_count=count,
            spread=spread,
            steps_per_sec=steps,
            samples_per_sec=samples,
            source=source,
            reports=1,
            updated_at=at,
        )
    elif smooth and row.source == source:
        row.steps_per_sec += SMOOTHING * (steps - row.steps_per_sec)
        if samples is not None:
            old = row.samples_per_sec if row.samples_per_sec is not None else samples
            row.samples_per_sec = old + SMOOTHING * (samples - old)
        row.reports += 1
        row.updated_at = at
    else:
        row.steps_per_sec, row.samples_per_sec = steps, samples
        row.source, row.reports, row.updated_at = source, 1, at
    session.add(row)
    return row


def record_throughput(
    session: Session, job_id: int, attempt: int, samples_per_sec: float, at: float
) -> ProfilePublic | None:
    """Fold one samples/s report of a running job into the profiles (no commit).

    Returns the profile it updated, or None when the report cannot be
    attributed: the job names no model, is not running this attempt, or
    its GPUs have no type.
    """
    if not samples_per_sec or samples_per_sec <= 0:
        return None
    job = session.get(Job, job_id)
    if job is None or not job.model or not job.placement or job.attempt != attempt:
        return None
    placement: dict[str, list[int]] = job.placement
    count = sum(len(g) for g in placement.values())
    if count < 1:
        return None
    first_node = min(placement)
    gpu = session.get(Gpu, (first_node, placement[first_node][0]))
    gpu_type = (gpu.type if gpu is not None else "").strip().lower()
    if not gpu_type:
        return None
    name = parse_model(job.model)
    batch = name.batch_size or 0
    steps = samples_per_sec / batch if batch else samples_per_sec
    key = (name.arch, batch, gpu_type, count, len(placement) > 1)
    row = _upsert(session, key, steps, samples_per_sec, f"job {job_id}", at, smooth=True)
    return _public(row)


def import_profiles(session: Session, body: ProfileImport, now: float) -> ProfileImportReply:
    """Store a batch of profiles (the latest for a key wins) in one transaction."""
    for i, p in enumerate(body.profiles):
        # Through the core model, so the rules (positive speed, a GPU type)
        # and the name parsing are the estimator's own. One bad row refuses
        # the batch before anything is committed.
        try:
            profile = ThroughputProfile(
                p.model, p.gpu_type, p.steps_per_sec, p.gpu_count, p.batch_size, p.spread
            )
        except ValueError as exc:
            raise BadRequest(f"profiles[{i}]: {exc}; nothing was stored") from None
        name = profile.name
        key = (name.arch, name.batch_size or 0, profile.gpu_type.strip().lower(),
               profile.gpu_count, profile.spread)  # fmt: skip
        _upsert(session, key, profile.steps_per_second, None, body.source, now, smooth=False)
    session.commit()
    return ProfileImportReply(stored=len(body.profiles))


def list_profiles(session: Session) -> ProfileList:
    rows = session.execute(
        select(ThroughputRecord).order_by(
            ThroughputRecord.model,
            col(ThroughputRecord.batch_size),
            col(ThroughputRecord.gpu_count),
            col(ThroughputRecord.spread),
            ThroughputRecord.gpu_type,
        )
    ).scalars()
    return ProfileList(items=[_public(r) for r in rows])


def load_table(session: Session) -> ProfileTable:
    """Every stored profile as the core's table (for the estimator and policies)."""
    rows = session.execute(select(ThroughputRecord)).scalars()
    return ProfileTable(
        ThroughputProfile(
            r.model, r.gpu_type, r.steps_per_sec, r.gpu_count, r.batch_size or None, r.spread
        )
        for r in rows
    )


def live_table(session: Session) -> ProfileTable:
    """The built-in Gavel profiles with every stored profile on top."""
    table = builtin_table("gavel")
    for profile in load_table(session).profiles():
        table.add(profile)
    return table


def mark(session: Session) -> tuple[int, float]:
    """Changes when a profile is added, and at most every REFRESH_SECONDS on updates."""
    count, latest = session.execute(
        select(func.count(), func.max(ThroughputRecord.updated_at))
    ).one()
    return int(count), float(latest or 0.0) // REFRESH_SECONDS


@functools.lru_cache(maxsize=64)
def takes_profiles(spec: str) -> bool:
    """True when the policy of `spec` has a `profiles` option the spec leaves unset.

    Remembered per spec: every scheduling round asks, and parsing a spec reads
    the policy's signature."""
    try:
        name, options = parse_spec(spec)
        return OPTION in options_of(name) and OPTION not in options
    except (UnknownPolicyError, ValueError):
        return False


def policy_overrides(spec: str, table: ProfileTable | None) -> dict[str, Any]:
    """Extra options to build `spec` with on the live server: the live profiles."""
    return {OPTION: table} if table is not None and takes_profiles(spec) else {}
