"""Checkpoints carried by the server between agents (no shared checkpoint path).

Owns the `job_checkpoint` table and the files under the checkpoint store
(`<store>/job-<id>.tar`): one checkpoint per job, the latest attempt's.

An agent that stops a preempted job packs the job's checkpoint directory
into a tar and uploads it (`PUT /api/v1/agent/jobs/{id}/checkpoint`)
before it reports the exit, so the job returns to the queue only once
its checkpoint is safe here (a job that ended for good has its checkpoint
deleted by `prune`, which the scheduler loop runs now and then). The
body is streamed to a temporary file, counted against
`checkpoint_max_bytes` (413 beyond it), hashed, and compared with the
sha256 the agent sent; only a complete, matching file
is renamed over the previous one and recorded. The next attempt's
assignment names the checkpoint (`CheckpointRef`); its agent downloads
it and checks the hash again before unpacking.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

from sqlalchemy import delete, select
from sqlmodel import Session, col

from schedulearn.protocol import CheckpointRef, JobState
from schedulearn.server.errors import NotFound
from schedulearn.server.models import Job, JobCheckpoint
from schedulearn.server.services import uploads
from schedulearn.server.services.uploads import Upload
from schedulearn.settings import ServerSettings

FINAL = tuple(s.value for s in JobState if s.is_final)


def store_dir(settings: ServerSettings) -> Path:
    """Where uploaded checkpoints live: the setting, else next to the SQLite file."""
    return uploads.store_dir(settings, settings.checkpoint_store_dir, "checkpoints")


def file_of(store: Path, job_id: int) -> Path:
    return store / f"job-{job_id}.tar"


def too_large_message(job_id: int, limit: int) -> str:
    return (
        f"the checkpoint of job {job_id} is over the server's limit of {limit} bytes "
        f"({limit / 1024**2:.0f} MiB); keep less in the checkpoint directory, raise "
        "SCHEDULEARN_CHECKPOINT_MAX_BYTES on the server, or configure a shared "
        "checkpoint path (SCHEDULEARN_CHECKPOINT_DIR)"
    )


async def receive(
    body: AsyncIterator[bytes],
    store: Path,
    job_id: int,
    attempt: int,
    node: str,
    sha256: str,
    limit: int,
    declared_length: int | None,
) -> Upload:
    """Stream an upload to a temporary file; refuse it if too big or damaged."""
    expected = uploads.Expected(
        job_id,
        attempt,
        node,
        sha256,
        limit,
        kind="checkpoint",
        what=f"the checkpoint of job {job_id}",
        header="X-Checkpoint-Sha256",
        too_large=too_large_message(job_id, limit),
        durable=True,
    )
    prefix = f".job-{job_id}.{attempt}."
    return await uploads.receive(body, store, prefix, expected, declared_length)


def commit(session: Session, store: Path, upload: Upload, now: float) -> CheckpointRef:
    """Keep an upload as the job's checkpoint, unless a later attempt's is already here."""
    job = session.get(Job, upload.job_id)
    if job is None:
        upload.tmp_path.unlink(missing_ok=True)
        raise NotFound(f"no job {upload.job_id}")
    row = session.get(JobCheckpoint, upload.job_id)
    if row is not None and row.attempt > upload.attempt:
        upload.tmp_path.unlink(missing_ok=True)
        return ref_of(row)
    os.replace(upload.tmp_path, file_of(store, upload.job_id))
    if row is None:
        row = JobCheckpoint(
            job_id=upload.job_id,
            attempt=upload.attempt,
            sha256=upload.sha256,
            size_bytes=upload.size_bytes,
            uploaded_at=now,
        )
    row.attempt = upload.attempt
    row.node = upload.node
    row.sha256 = upload.sha256
    row.size_bytes = upload.size_bytes
    row.uploaded_at = now
    session.add(row)
    session.commit()
    return ref_of(row)


class _Stored(Protocol):
    """A stored checkpoint's columns: the ORM row, or a plain one (a work handout's)."""

    attempt: int
    sha256: str
    size_bytes: int


def ref_of(row: _Stored) -> CheckpointRef:
    return CheckpointRef(attempt=row.attempt, sha256=row.sha256, size_bytes=row.size_bytes)


def current(session: Session, job_id: int) -> CheckpointRef | None:
    row = session.get(JobCheckpoint, job_id)
    return None if row is None else ref_of(row)


def download(session: Session, store: Path, job_id: int) -> tuple[Path, CheckpointRef]:
    row = session.get(JobCheckpoint, job_id)
    path = file_of(store, job_id)
    if row is None or not path.is_file():
        raise NotFound(f"the server holds no checkpoint of job {job_id}")
    return path, ref_of(row)


def prune(session: Session, store: Path) -> int:
    """Delete the checkpoints of jobs that ended for good; how many went."""
    rows = session.execute(
        select(col(JobCheckpoint.job_id))
        .join(Job, col(Job.id) == col(JobCheckpoint.job_id))
        .where(col(Job.state).in_(FINAL))
    ).scalars()
    gone = list(rows)
    if not gone:
        return 0
    for job_id in gone:
        file_of(store, job_id).unlink(missing_ok=True)
    session.execute(delete(JobCheckpoint).where(col(JobCheckpoint.job_id).in_(gone)))
    session.commit()
    return len(gone)
