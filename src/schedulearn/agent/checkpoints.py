"""Carrying a job's checkpoint directory through the server (no shared path).

After a preempted run stops, `upload` packs its checkpoint directory into
a tar (`checkpoint_tar.pack`: by descriptors, never following a link, no
larger than the server's limit), hashes it, and streams it to the server
(`PUT .../jobs/{id}/checkpoint`); the exit is reported only after that, so
the job returns to the queue with its checkpoint safe. Before a run
starts, `fetch` downloads the checkpoint the assignment names, checks its
sha256, and unpacks it in place of the local directory
(`checkpoint_tar.safe_extract`: no absolute paths, no `..`, no devices,
no links leading outside, no setuid bits).

A marker next to the directory (`<dir>.attempt`) records which attempt's
state the local directory holds, so a node whose newer checkpoint never
reached the server (a failed upload) does not overwrite it with an
older one from the server.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from schedulearn.agent import checkpoint_tar
from schedulearn.agent.checkpoint_tar import CheckpointError, safe_extract
from schedulearn.agent.client import AgentClient, AuthRejected, ProtocolRefused, Rejected
from schedulearn.agent.retry import GaveUp, Retry, Temporary
from schedulearn.protocol import DEFAULT_CHECKPOINT_MAX_BYTES, CheckpointRef

log = logging.getLogger(__name__)

UPLOAD_TRIES = 12
# The limit of a server too old to say its own: its default.
DEFAULT_LIMIT = DEFAULT_CHECKPOINT_MAX_BYTES
# At most this many left-out entries are named in the exit message.
NAMED = 5
__all__ = ["CheckpointError", "Packed", "fetch", "pack", "safe_extract", "upload"]


class _Damaged(Temporary):
    """A download whose sha256 is not the checkpoint's: the next one may arrive whole."""


def _download_may_pass(exc: BaseException) -> bool:
    # Any refusal but the token's or the protocol's is tried again, as the
    # server may still be writing the checkpoint an earlier attempt uploaded.
    if isinstance(exc, AuthRejected | ProtocolRefused):
        return False
    return isinstance(exc, Temporary | Rejected)


@dataclass(frozen=True, slots=True)
class Packed:
    path: Path
    sha256: str
    size_bytes: int
    files: int
    left_out: list[str]


def marker(checkpoint_dir: Path) -> Path:
    return checkpoint_dir.with_name(checkpoint_dir.name + ".attempt")


def local_attempt(checkpoint_dir: Path) -> int:
    try:
        return int(marker(checkpoint_dir).read_text().strip())
    except (OSError, ValueError):
        return 0


def mark(checkpoint_dir: Path, attempt: int) -> None:
    path = marker(checkpoint_dir)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(attempt))
    tmp.replace(path)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as src:
        while chunk := src.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def too_large_message(limit: int) -> str:
    return (
        f"the checkpoint directory is over the server's limit of {limit} bytes "
        f"({limit / 1024**2:.0f} MiB, counting each file's apparent size, sparse ones "
        "whole); keep less in it, raise SCHEDULEARN_CHECKPOINT_MAX_BYTES on the server, "
        "or configure a shared checkpoint path (SCHEDULEARN_CHECKPOINT_DIR)"
    )


def pack(checkpoint_dir: Path, into: Path, limit: int = DEFAULT_LIMIT) -> Packed | None:
    """The directory as a tar at `into` (see `checkpoint_tar.pack`); None when it
    holds no file. `into` must be in a folder only the agent can enter."""
    if not checkpoint_dir.is_dir():
        return None
    result = checkpoint_tar.pack(checkpoint_dir, into, limit, too_large_message(limit))
    if result.files == 0:
        into.unlink(missing_ok=True)
        return None
    return Packed(into, sha256_of(into), into.stat().st_size, result.files, result.left_out)


def pack_folder(work: Path) -> Path:
    """A new folder in `work` for a tar being packed: the agent's alone (0700), so
    no job can read the tar, or put a link where it will be written."""
    return Path(tempfile.mkdtemp(prefix=".checkpoint-", dir=work))


async def upload(
    client: AgentClient,
    job_id: int,
    attempt: int,
    node: str,
    checkpoint_dir: Path,
    work: Path,
    limit: int | None = None,
) -> str:
    """Pack and upload; a sentence for the job's exit message. Raises CheckpointError.

    The tar is written in a new folder of `work` (the run's directory, the
    agent's) that only the agent can enter (0700), and removed after."""
    folder = pack_folder(work)
    try:
        return await _upload(
            client, job_id, attempt, node, checkpoint_dir, folder, limit or DEFAULT_LIMIT
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _upload(
    client: AgentClient,
    job_id: int,
    attempt: int,
    node: str,
    checkpoint_dir: Path,
    folder: Path,
    limit: int,
) -> str:
    packed = await asyncio.to_thread(pack, checkpoint_dir, folder / "checkpoint.tar", limit)
    if packed is None:
        return "no checkpoint to carry: the checkpoint directory is empty"
    retry = Retry(f"upload the checkpoint of job {job_id}", first=0.5, tries=UPLOAD_TRIES)
    try:
        ref = await retry.run(
            lambda: client.put_checkpoint(
                job_id, attempt, node, packed.path, packed.sha256, packed.size_bytes
            )
        )
    except GaveUp as exc:
        raise CheckpointError(
            f"the server did not take it after {UPLOAD_TRIES} tries: {exc.last}"
        ) from exc
    except AuthRejected:
        raise
    except Rejected as exc:
        raise CheckpointError(f"the server refused it: {exc.message}") from exc
    finally:
        packed.path.unlink(missing_ok=True)
    mark(checkpoint_dir, attempt)
    said = (
        f"checkpoint of attempt {ref.attempt} saved on the server "
        f"({packed.files} files, {packed.size_bytes} bytes, sha256 {packed.sha256[:12]})"
    )
    if packed.left_out:
        more = len(packed.left_out) - NAMED
        named = ", ".join(packed.left_out[:NAMED]) + (f" and {more} more" if more > 0 else "")
        said += f"; left out: {named}"
    return said


async def fetch(
    client: AgentClient,
    job_id: int,
    ref: CheckpointRef,
    checkpoint_dir: Path,
    owner: tuple[int, int] | None = None,
) -> str | None:
    """Put the server's checkpoint `ref` in `checkpoint_dir`, its files `owner`'s (uid,
    gid: the job's account); a note for the log, or None when the local directory
    already holds the same or a newer state."""
    if local_attempt(checkpoint_dir) >= ref.attempt and checkpoint_dir.is_dir():
        return None
    checkpoint_dir.parent.mkdir(parents=True, exist_ok=True)
    archive = checkpoint_dir.with_name(checkpoint_dir.name + ".download")
    incoming = checkpoint_dir.with_name(checkpoint_dir.name + ".incoming")

    async def download() -> None:
        got = await client.get_checkpoint(job_id, archive)
        if got != ref.sha256:
            raise _Damaged(f"downloaded damaged (sha256 {got}, expected {ref.sha256})")

    retry = Retry(
        f"download the checkpoint of job {job_id}",
        first=0.5,
        tries=UPLOAD_TRIES,
        retryable=_download_may_pass,
    )
    try:
        try:
            await retry.run(download)
        except GaveUp as exc:
            if isinstance(exc.last, _Damaged):
                raise CheckpointError(f"the checkpoint of job {job_id} {exc.last}") from exc
            raise CheckpointError(
                f"could not download the checkpoint of job {job_id}: {exc.last}"
            ) from exc
        except Rejected as exc:
            raise CheckpointError(
                f"could not download the checkpoint of job {job_id}: {exc}"
            ) from exc
        shutil.rmtree(incoming, ignore_errors=True)
        incoming.mkdir()
        count = await asyncio.to_thread(safe_extract, archive, incoming, owner)
        old = checkpoint_dir.with_name(checkpoint_dir.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if checkpoint_dir.exists():
            checkpoint_dir.rename(old)
        incoming.rename(checkpoint_dir)
        shutil.rmtree(old, ignore_errors=True)
        mark(checkpoint_dir, ref.attempt)
    finally:
        archive.unlink(missing_ok=True)
        shutil.rmtree(incoming, ignore_errors=True)
    return f"restored the checkpoint of attempt {ref.attempt} ({count} files) from the server"
