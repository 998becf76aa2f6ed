"""Full logs: an attempt's whole output, uploaded by its agent when the attempt ends.

Owns the `job_full_log` table and the files under the log store
(`<store>/job-<id>/attempt-<n>.log`, in the agent's spool format:
`agent.logspool`). An agent uploads one only when the server asked for
it (the job's stored log was cut at its cap: `services.logs`), before it
reports the attempt's exit; the body is streamed to a temporary file,
counted against `log_full_max_bytes` (413 beyond it), hashed and
compared with the sha256 the agent sent, then renamed into place.

Why the agent uploads rather than the server fetching from the agent
when asked: agents make every connection (the server never reaches
into a node, which may sit behind NAT or a firewall), and an upload
made before the exit report is safe however long the node lives after.

`logs --full` and the web's download read `plain_text`: each attempt's
full log when there is one, else what the database kept of it, as plain
text (one line per output line, stdout and stderr in arrival order);
with more than one attempt, a header line names each.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from sqlmodel import Session, col

from schedulearn.server.auth import Caller
from schedulearn.server.errors import NotFound
from schedulearn.server.models import Job, JobFullLog, LogRecord
from schedulearn.server.services import uploads, visibility
from schedulearn.server.services.uploads import Upload
from schedulearn.settings import ServerSettings


def store_dir(settings: ServerSettings) -> Path:
    """Where full logs live: the setting, else next to the SQLite file."""
    return uploads.store_dir(settings, settings.log_store_dir, "logs")


def file_of(store: Path, job_id: int, attempt: int) -> Path:
    return store / f"job-{job_id}" / f"attempt-{attempt}.log"


def has_any(job_id: Any) -> Any:
    """SQL: the job has a full log (for `logs.expire`)."""
    return select(col(JobFullLog.job_id)).where(col(JobFullLog.job_id) == job_id).exists()


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
        kind="log",
        what=f"the full log of job {job_id}",
        header="X-Log-Sha256",
        too_large=(
            f"the full log of job {job_id} attempt {attempt} is over the server's limit of "
            f"{limit} bytes; raise SCHEDULEARN_LOG_FULL_MAX_BYTES on the server, or lower the "
            "agent's log_disk_max_bytes"
        ),
    )
    folder = file_of(store, job_id, attempt).parent
    return await uploads.receive(body, folder, f".attempt-{attempt}.", expected, declared_length)


def commit(session: Session, store: Path, upload: Upload, now: float) -> None:
    """Keep an upload as its attempt's full log."""
    if session.get(Job, upload.job_id) is None:
        upload.tmp_path.unlink(missing_ok=True)
        raise NotFound(f"no job {upload.job_id}")
    os.replace(upload.tmp_path, file_of(store, upload.job_id, upload.attempt))
    row = session.get(JobFullLog, (upload.job_id, upload.attempt)) or JobFullLog(
        job_id=upload.job_id, attempt=upload.attempt
    )
    row.node = upload.node
    row.sha256 = upload.sha256
    row.size_bytes = upload.size_bytes
    row.uploaded_at = now
    session.add(row)
    session.commit()


def forget(session: Session, store: Path, job_ids: list[int]) -> None:
    """Delete the full logs of these jobs (rows here; the caller commits)."""
    session.execute(delete(JobFullLog).where(JobFullLog.job_id.in_(job_ids)))  # type: ignore[attr-defined]
    for job_id in job_ids:
        shutil.rmtree(store / f"job-{job_id}", ignore_errors=True)


# --- reading ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Part:
    """One attempt's share of a full log: its file, or the lines the database kept."""

    attempt: int
    node: str
    path: Path | None
    stored: tuple[str, ...]


def plan_for(session: Session, store: Path, job_id: int, caller: Caller) -> list[Part]:
    """What `plain_text` will print, for a caller who may see the job's logs."""
    visibility.require_details(session, job_id, caller, "logs")
    if session.get(Job, job_id) is None:
        raise NotFound(f"no job {job_id}; list jobs with `schedulearn jobs`")
    uploaded = {
        row.attempt: row
        for row in session.execute(select(JobFullLog).where(JobFullLog.job_id == job_id))  # type: ignore[arg-type]
        .scalars()
        .all()
    }
    stored: dict[int, list[str]] = {}
    nodes: dict[int, str] = {}
    # Every attempt's stored lines (at most the per-job cap): an uploaded
    # attempt's are printed when its file is not the one its agent sent.
    for attempt, node, text in session.execute(
        select(col(LogRecord.attempt), col(LogRecord.node), col(LogRecord.text))
        .where(col(LogRecord.job_id) == job_id)
        .order_by(col(LogRecord.id))
    ):
        stored.setdefault(attempt, []).append(text)
        nodes.setdefault(attempt, node)
    parts = []
    for attempt in sorted(set(uploaded) | set(stored)):
        row = uploaded.get(attempt)
        kept = tuple(stored.get(attempt, ()))
        if row is None:
            parts.append(Part(attempt, nodes.get(attempt, ""), None, kept))
            continue
        path = file_of(store, job_id, attempt)
        if _is_the_upload(path, row):
            parts.append(Part(attempt, row.node, path, ()))
        else:
            parts.append(Part(attempt, row.node, None, (_not_in_store(store, attempt), *kept)))
    return parts


def _is_the_upload(path: Path, row: JobFullLog) -> bool:
    """Whether `path` is still the file this attempt's agent uploaded (by its size:
    a stat, where the hash would read the whole file)."""
    try:
        return path.stat().st_size == row.size_bytes
    except OSError:
        return False


def _not_in_store(store: Path, attempt: int) -> str:
    # Removed by hand, or written over: another server on another database
    # keeping its full logs in the same folder (a server on PostgreSQL keeps
    # them in the user's data directory by default), whose job of the same
    # id uploaded there too. Its output is not this job's to print.
    return (
        f"[schedulearn: the full log of attempt {attempt} is no longer in the log store "
        f"{store} as its agent uploaded it (removed, or written over by another server "
        "keeping its full logs in the same folder: give each server its own "
        "SCHEDULEARN_LOG_STORE_DIR); below are the lines the database kept]"
    )


def plain_text(parts: list[Part]) -> Iterator[bytes]:
    """The full log as plain text, in chunks (blocking file reads: iterate off the loop)."""
    several = len(parts) > 1
    for part in parts:
        if several:
            yield f"[schedulearn: attempt {part.attempt} on node {part.node!r}]\n".encode()
        if part.path is None:
            # In chunks of many lines: each chunk costs the server a thread hop.
            for i in range(0, len(part.stored), 2000):
                block = part.stored[i : i + 2000]
                yield ("\n".join(block) + "\n").encode("utf-8", errors="replace")
            continue
        with part.path.open("rb") as src:
            rest = b""
            while chunk := src.read(1 << 20):
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                rest = data[cut:]
                yield _texts(data[:cut])
            if rest:
                yield _texts(rest + b"\n")


def _texts(spooled: bytes) -> bytes:
    """Spool lines (`o<time> <text>`) -> their texts, one per line."""
    out = []
    for raw in spooled.split(b"\n")[:-1]:
        _, _, text = raw.partition(b" ")
        out.append(text)
    out.append(b"")
    return b"\n".join(out)
