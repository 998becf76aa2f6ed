"""Files agents upload to the server (checkpoints, full logs): the shared part.

Where a kind of upload is stored, and how one arrives: streamed to a
temporary file, counted against a size limit (413 beyond it), hashed, and
compared with the sha256 the agent sent. What happens to a complete file
is the caller's (`checkpoints`, `full_logs`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from schedulearn.server.errors import BadRequest, ServiceError
from schedulearn.settings import ServerSettings, data_dir


class TooLarge(ServiceError):
    """An upload over the server's size limit (HTTP 413)."""

    status = 413


@dataclass(frozen=True, slots=True)
class Upload:
    job_id: int
    attempt: int
    node: str
    sha256: str
    size_bytes: int
    tmp_path: Path


def store_dir(settings: ServerSettings, configured: str | None, folder: str) -> Path:
    """`configured` if set, else `folder` next to the SQLite file, else in the data dir."""
    if configured:
        return Path(configured)
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return Path(url.database).resolve().parent / folder
    return data_dir() / folder


@dataclass(frozen=True, slots=True)
class Expected:
    """What an upload must be: its owner, size limit, hash, and how to word a refusal."""

    job_id: int
    attempt: int
    node: str
    sha256: str
    limit: int
    kind: str  # "checkpoint", "log": "send the checkpoint's sha256 ..."
    what: str  # "the checkpoint of job 3": "... arrived damaged"
    header: str  # where the agent sends the hash
    too_large: str  # the 413's message
    durable: bool = False  # fsync before it counts as received


async def receive(
    body: AsyncIterator[bytes],
    folder: Path,
    prefix: str,
    expected: Expected,
    declared_length: int | None,
) -> Upload:
    """Stream `body` to a new temporary file in `folder` (its name starts with
    `prefix`); refuse it if too big or damaged (and remove the file).

    Each upload gets a file of its own: an agent whose request timed out
    sends the same attempt's file again while the first request may still
    be arriving, and two uploads writing one file left a run of zeros in
    it, which a reader saw as lines missing (seen with `logs --full`).
    """
    if declared_length is not None and declared_length > expected.limit:
        raise TooLarge(expected.too_large)
    sha256 = expected.sha256.lower()
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise BadRequest(f"send the {expected.kind}'s sha256 (64 hex digits) in {expected.header}")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # jobs' checkpoints and logs
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=".upload", dir=folder)
    tmp = Path(name)
    digest = hashlib.sha256()
    size = 0
    try:
        with open(fd, "wb") as out:
            async for chunk in body:
                size += len(chunk)
                if size > expected.limit:
                    raise TooLarge(expected.too_large)
                digest.update(chunk)
                out.write(chunk)
            if expected.durable:
                out.flush()
                os.fsync(out.fileno())
        got = digest.hexdigest()
        if got != sha256:
            raise BadRequest(
                f"{expected.what} arrived damaged: its sha256 is {got}, the "
                f"agent said {sha256}; the agent should send it again"
            )
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Upload(expected.job_id, expected.attempt, expected.node, sha256, size, tmp)
