"""Carrying a job's checkpoint directory through the server (no shared path).

After a preempted run stops, `upload` packs its checkpoint directory into
a tar (regular files and folders only), hashes it, and streams it to the
server (`PUT .../jobs/{id}/checkpoint`); the exit is reported only after
that, so the job returns to the queue with its checkpoint safe. Before a
run starts, `fetch` downloads the checkpoint the assignment names,
checks its sha256, and unpacks it in place of the local directory,
refusing any member that is not a plain file or folder inside it (no
absolute paths, no `..`, no links or devices).

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
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from schedulearn.agent.client import AgentClient, AuthRejected, ProtocolRefused, Rejected
from schedulearn.agent.retry import GaveUp, Retry, Temporary
from schedulearn.protocol import CheckpointRef

log = logging.getLogger(__name__)

UPLOAD_TRIES = 12


class CheckpointError(RuntimeError):
    """A checkpoint could not be carried; the message says why and what to do."""


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


def pack(checkpoint_dir: Path, into: Path) -> Packed | None:
    """The directory as a tar at `into`; None when it holds no file."""
    if not checkpoint_dir.is_dir():
        return None
    files = 0
    # The directory is the job's account's: a file someone else owns got there
    # by a hard link (to a file the agent, as root, could read but the job
    # could not), and is never carried.
    owner = checkpoint_dir.stat().st_uid
    with tarfile.open(into, "w") as tar:
        for path in sorted(checkpoint_dir.rglob("*")):
            rel = path.relative_to(checkpoint_dir).as_posix()
            if path.is_symlink():
                continue  # never carry links: they may point anywhere on this host
            if path.is_file() and path.stat().st_uid != owner:
                continue
            if path.is_file():
                # A temporary file of a save in progress is not the checkpoint.
                if path.name.endswith(".tmp") and path.name.startswith("."):
                    continue
                tar.add(path, arcname=rel, recursive=False)
                files += 1
            elif path.is_dir():
                tar.add(path, arcname=rel, recursive=False)
    if files == 0:
        into.unlink(missing_ok=True)
        return None
    return Packed(into, sha256_of(into), into.stat().st_size, files)


def safe_extract(archive: Path, target: Path) -> int:
    """Unpack `archive` into the empty folder `target`; refuse anything unsafe."""
    count = 0
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        for m in members:
            name = PurePosixPath(m.name)
            if name.is_absolute() or ".." in name.parts or not (m.isfile() or m.isdir()):
                raise CheckpointError(
                    f"the checkpoint holds {m.name!r}, which is not a plain file or folder "
                    "inside the checkpoint directory; refusing to unpack it"
                )
        for m in members:
            dest = target / m.name
            if m.isdir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(m)
            if src is None:
                continue
            with src, dest.open("wb") as out:
                shutil.copyfileobj(src, out, 1024 * 1024)
            count += 1
    return count


async def upload(
    client: AgentClient, job_id: int, attempt: int, node: str, checkpoint_dir: Path, work: Path
) -> str:
    """Pack and upload; a sentence for the job's exit message. Raises CheckpointError."""
    packed = await asyncio.to_thread(pack, checkpoint_dir, work / "checkpoint.tar")
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
    return (
        f"checkpoint of attempt {ref.attempt} saved on the server "
        f"({packed.files} files, {packed.size_bytes} bytes, sha256 {packed.sha256[:12]})"
    )


async def fetch(
    client: AgentClient, job_id: int, ref: CheckpointRef, checkpoint_dir: Path
) -> str | None:
    """Put the server's checkpoint `ref` in `checkpoint_dir`; a note for the log, or None
    when the local directory already holds the same or a newer state."""
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
        count = await asyncio.to_thread(safe_extract, archive, incoming)
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
