"""A checkpoint directory as a tar, and back, without trusting what the job left there.

The agent packs and unpacks as root, in a directory the job's account owns
and may change while the agent works (a job's stray process, another job of
the same user). So nothing here resolves a path twice:

`pack` walks the directory by descriptors: each folder is opened with
`openat(O_NOFOLLOW | O_DIRECTORY)` relative to its parent's descriptor,
each file with `openat(O_NOFOLLOW)`, checked with `fstat` on the open
descriptor, and copied from that descriptor. A folder swapped for a link to
another user's home (`renameat2(RENAME_EXCHANGE)`) is either the folder
(already open) or a link (never followed). Stored: folders and regular files
the directory's owner owns, and links as links (only relative ones that stay
inside; the rest are left out and named). Left out and named: files someone
else owns (a hard link to another user's file), devices, fifos, sockets.
Modes keep the permission bits only (no setuid, setgid or sticky bit), and
no owner names. The tar is counted while it is written, apparent sizes
(`st_size`: a sparse file counts whole): a member that would take it past
the server's limit stops the packing before it is written, and the partial
tar is removed. The caller gives a path in a folder only the agent can
enter; the tar is created there 0600 (`O_EXCL | O_NOFOLLOW`).

`safe_extract` unpacks into a new, empty folder the agent made: absolute
names, `..`, hard links, devices and links that lead outside are refused
(the whole checkpoint); files are created with `O_EXCL | O_NOFOLLOW` under
folders opened with `O_NOFOLLOW`, links made last, and modes lose their
setuid, setgid and sticky bits.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

BLOCK = tarfile.BLOCKSIZE
END = 2 * BLOCK  # the two zero blocks that end an archive
# Deeper than this is no checkpoint: a folder chain built to exhaust descriptors.
MAX_DEPTH = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a fifo swapped in after the lstat must not hang the agent.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class CheckpointError(RuntimeError):
    """A checkpoint could not be carried; the message says why and what to do."""


class TooLarge(CheckpointError):
    """Packing stopped: the tar would pass the server's limit."""


@dataclass(slots=True)
class PackResult:
    files: int = 0
    left_out: list[str] = field(default_factory=list)


def _round(n: int, to: int) -> int:
    return -(-n // to) * to


def inside(rel: str, target: str) -> bool:
    """Whether link `rel` (a path inside the directory) to `target` stays inside it."""
    if not target or target.startswith("/"):
        return False
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return resolved != ".." and not resolved.startswith("../")


class _Capped:
    """The tar's file: refuses any write that would take it past `limit` bytes."""

    def __init__(self, out: IO[bytes], limit: int, said: Callable[[], str]) -> None:
        self._out, self._limit, self._said, self.size = out, limit, said, 0

    def write(self, data: bytes) -> int:
        if self.size + len(data) > self._limit:
            raise TooLarge(self._said())
        self.size += len(data)
        try:
            return self._out.write(data)
        except OSError as exc:  # not a member's fault: the tar itself is broken
            raise CheckpointError(f"could not write the checkpoint's tar: {exc}") from exc

    def tell(self) -> int:
        return self.size


class _Packer:
    def __init__(self, tar: tarfile.TarFile, owner: int, limit: int, too_large: str) -> None:
        self.tar, self.owner, self.limit, self.too_large = tar, owner, limit, too_large
        self.result = PackResult()

    def _fits(self, info: tarfile.TarInfo) -> None:
        """Refuse `info` before a byte of it is written if the finished tar
        (its header, its data, the end blocks, the last record) would pass the limit."""
        header = len(info.tobuf(self.tar.format, self.tar.encoding, self.tar.errors))
        end = self.tar.offset + header + _round(info.size, BLOCK) + END
        if _round(end, tarfile.RECORDSIZE) > self.limit:
            raise TooLarge(f"{self.too_large} (at {info.name!r}, {info.size} bytes)")

    def _info(self, rel: str, st: os.stat_result, kind: bytes) -> tarfile.TarInfo:
        info = tarfile.TarInfo(rel)
        info.type = kind
        info.mode = stat.S_IMODE(st.st_mode) & 0o777  # no setuid, setgid, sticky
        info.mtime = int(st.st_mtime)
        info.size = st.st_size if kind == tarfile.REGTYPE else 0
        return info

    def walk(self, dir_fd: int, rel: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise CheckpointError(f"the checkpoint directory is deeper than {MAX_DEPTH} folders")
        for name in sorted(os.listdir(dir_fd)):
            path = f"{rel}/{name}" if rel else name
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    self._link(dir_fd, name, path, st)
                elif stat.S_ISDIR(st.st_mode):
                    self._folder(dir_fd, name, path, depth)
                elif stat.S_ISREG(st.st_mode):
                    if not (name.startswith(".") and name.endswith(".tmp")):  # a save under way
                        self._file(dir_fd, name, path)
                else:
                    self.result.left_out.append(f"{path} (not a file, folder or link)")
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone, or swapped, while we looked: not part of what is carried
            except OSError as exc:  # opening or reading its metadata: nothing written yet
                self.result.left_out.append(f"{path} ({exc.strerror or exc})")

    def _link(self, dir_fd: int, name: str, path: str, st: os.stat_result) -> None:
        target = os.readlink(name, dir_fd=dir_fd)
        if not inside(path, target):
            self.result.left_out.append(f"{path} (a link leading outside the directory)")
            return
        info = self._info(path, st, tarfile.SYMTYPE)
        info.mode, info.linkname = 0o777, target
        self._fits(info)
        self.tar.addfile(info)

    def _folder(self, dir_fd: int, name: str, path: str, depth: int) -> None:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)  # a link here: ELOOP, never followed
        try:
            st = os.fstat(fd)
            if st.st_uid != self.owner:
                self.result.left_out.append(f"{path} (a folder of another user)")
                return
            info = self._info(path, st, tarfile.DIRTYPE)
            self._fits(info)
            self.tar.addfile(info)
            self.walk(fd, path, depth + 1)
        finally:
            os.close(fd)

    def _file(self, dir_fd: int, name: str, path: str) -> None:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        with open(fd, "rb") as src:
            st = os.fstat(fd)  # what was opened, not what the name leads to now
            if not stat.S_ISREG(st.st_mode):
                self.result.left_out.append(f"{path} (not a regular file)")
                return
            if st.st_uid != self.owner:
                # A hard link to a file the job's account could not read itself.
                self.result.left_out.append(f"{path} (a file of another user)")
                return
            info = self._info(path, st, tarfile.REGTYPE)
            self._fits(info)
            os.set_blocking(fd, True)
            try:
                self.tar.addfile(info, src)  # reads exactly info.size bytes, else raises
            except OSError as exc:
                # Its header is written: the tar cannot go on without it.
                raise CheckpointError(
                    f"{path} changed while it was packed ({exc}); is the job still writing it?"
                ) from exc
            self.result.files += 1


def pack(checkpoint_dir: Path, into: Path, limit: int, too_large: str) -> PackResult:
    """Write the directory as a tar at `into` (a new file, 0600); `too_large` is the
    message when the tar would pass `limit` bytes (then nothing is left at `into`)."""
    root = os.open(checkpoint_dir, _DIR_FLAGS)
    try:
        out_fd = os.open(
            into, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            with open(out_fd, "wb") as out:
                capped = _Capped(out, limit, lambda: too_large)
                with tarfile.open(fileobj=capped, mode="w", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]  # any object with write and tell is a tar's file
                    packer = _Packer(tar, os.fstat(root).st_uid, limit, too_large)
                    packer.walk(root, "", 0)
        except BaseException:
            into.unlink(missing_ok=True)
            raise
    finally:
        os.close(root)
    return packer.result


def _check_member(m: tarfile.TarInfo) -> str:
    """The member's clean relative name ("" for the directory itself); raises if it
    is no plain file, folder or inner link."""
    name = PurePosixPath(m.name)
    if not name.parts and m.isdir():
        return ""
    ok = not name.is_absolute() and ".." not in name.parts and bool(name.parts)
    if ok and m.issym():
        ok = inside(name.as_posix(), m.linkname)
    if not ok or not (m.isfile() or m.isdir() or m.issym()):
        raise CheckpointError(
            f"the checkpoint holds {m.name!r}, which is not a plain file, folder or link "
            "inside the checkpoint directory; refusing to unpack it"
        )
    return name.as_posix()


Owner = tuple[int, int] | None  # uid, gid for what a restore creates (None: the agent's)


def _parent_fd(root: int, parts: tuple[str, ...], opened: list[int], owner: Owner) -> int:
    """Open (making as needed, 0700) the folders `parts` under `root`, never following links."""
    fd = root
    for part in parts:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o700, dir_fd=fd)
            if owner is not None:
                os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
        fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
        opened.append(fd)
    return fd


def safe_extract(archive: Path, target: Path, owner: Owner = None) -> int:
    """Unpack `archive` into the empty folder `target`; refuse anything unsafe.
    Everything made is `owner`'s (the job's account) from the start, and
    `target` itself becomes theirs through its open descriptor once it is
    full: nothing is ever changed by path, which a job could swap for a link
    while the agent walked it. How many files it held.

    Plain tar only (`pack` writes no other): a compressed member list could
    be a decompression bomb."""
    count = 0
    try:
        tar = tarfile.open(archive, "r:")  # noqa: SIM115  # closed by the with below
    except tarfile.TarError as exc:
        raise CheckpointError(f"the checkpoint is not a plain tar archive: {exc}") from exc
    with tar:
        members = [(m, _check_member(m)) for m in tar.getmembers()]
        root = os.open(target, _DIR_FLAGS)
        try:
            # Links last: no file is ever written through one of the archive's links.
            for m, name in sorted(members, key=lambda pair: pair[0].issym()):
                if not name:
                    continue
                *parents, leaf = name.split("/")
                opened: list[int] = []
                try:
                    parent = _parent_fd(root, tuple(parents), opened, owner)
                    if m.isdir():
                        os.close(_parent_fd(parent, (leaf,), [], owner))
                    elif m.issym():
                        os.symlink(m.linkname, leaf, dir_fd=parent)
                        if owner is not None:
                            os.chown(leaf, *owner, dir_fd=parent, follow_symlinks=False)
                    else:
                        count += _write(tar, m, parent, leaf, owner)
                except FileExistsError as exc:
                    raise CheckpointError(
                        f"the checkpoint holds {m.name!r} twice; refusing to unpack it"
                    ) from exc
                finally:
                    for fd in opened:
                        os.close(fd)
            if owner is not None:
                os.fchown(root, *owner)
            os.fchmod(root, 0o700)
        finally:
            os.close(root)
    return count


def _write(tar: tarfile.TarFile, m: tarfile.TarInfo, parent: int, leaf: str, owner: Owner) -> int:
    src = tar.extractfile(m)
    if src is None:
        return 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(leaf, flags, 0o600, dir_fd=parent)
    if owner is not None:
        os.fchown(fd, *owner)  # before a byte is written
    with src, open(fd, "wb") as out:
        while chunk := src.read(1024 * 1024):
            out.write(chunk)
        # The permission bits only: a restored file is never setuid or setgid.
        os.fchmod(out.fileno(), (m.mode & 0o777) | 0o600)
    return 1
