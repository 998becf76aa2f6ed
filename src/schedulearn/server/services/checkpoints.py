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

import hashlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.engine import make_url
from sqlmodel import Session, col

from schedulearn.protocol import CheckpointRef, JobState
from schedulearn.server.errors import BadRequest, NotFound, ServiceError
from schedulearn.server.models import Job, JobCheckpoint
from schedulearn.settings import ServerSettings, data_dir

FINAL = tuple(s.value for s in JobState if s.is_final)


class TooLarge(ServiceError):
    """A checkpoint over the server's size limit (HTTP 413)."""

    status = 413


@dataclass(frozen=True, slots=True)
class Upload:
    job_id: int
    attempt: int
    node: str
    sha256: str
    size_bytes: int
    tmp_path: Path


def store_dir(settings: ServerSettings) -> Path:
    """Where uploaded checkpoints live: the setting, else next to the SQLite file."""
    if settings.checkpoint_store_dir:
        return Path(settings.checkpoint_store_dir)
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return Path(url.database).resolve().parent / "checkpoints"
    return data_dir() / "checkpoints"


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
    if declared_length is not None and declared_length > limit:
        raise TooLarge(too_large_message(job_id, limit))
    sha256 = sha256.lower()
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise BadRequest("send the checkpoint's sha256 (64 hex digits) in X-Checkpoint-Sha256")
    store.mkdir(parents=True, exist_ok=True)
    tmp = store / f".job-{job_id}.{attempt}.{os.getpid()}.upload"
    digest = hashlib.sha256()
    size = 0
    try:
        with tmp.open("wb") as out:
            async for chunk in body:
                size += len(chunk)
                if size > limit:
                    raise TooLarge(too_large_message(job_id, limit))
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        got = digest.hexdigest()
        if got != sha256:
            raise BadRequest(
                f"the checkpoint of job {job_id} arrived damaged: its sha256 is {got}, the "
                f"agent said {sha256}; the agent should send it again"
            )
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Upload(job_id, attempt, node, sha256, size, tmp)


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


def ref_of(row: JobCheckpoint) -> CheckpointRef:
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
