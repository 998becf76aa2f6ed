"""Spare directories: a finished job's directories, kept for the next job.

Why not delete and create: on ext4, a node that starts and ends many
short jobs spends most of its CPU in the kernel looking for a free inode
past the ones deleted in the last half minute (`perf` under
`bench/api_load.py`: a quarter of the machine's CPU at ~5 inodes a job).
A renamed directory and a truncated file allocate none.

A directory is kept only when it holds nothing but the files in `keep`,
and only when no process still has one of them open: the output of a
stray process that escaped its job's process group must never land in
the next job's log. The check is a write lease (`F_SETLEASE`), which the
kernel grants only on a file nobody else has open. Kept files are
truncated, except those named in `blank`, which are overwritten with
spaces instead: truncating a file whose data ext4 has not written yet
makes it write the data and wait for the disk (`auto_da_alloc`; 1 to 7
ms per job on a fresh machine of this project's kind, which stalled the
agent's event loop), overwriting it does not. The directory is renamed
into the pool. At most `limit` are kept; what does not qualify is
deleted as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import shutil
from pathlib import Path


class SparePool:
    """Directories under `root`, each ready to be renamed into use."""

    def __init__(
        self,
        root: Path,
        keep: frozenset[str] = frozenset(),
        limit: int = 256,
        blank: frozenset[str] = frozenset(),
    ) -> None:
        self.root = root
        self.keep = keep
        self.blank = blank
        self.limit = limit
        root.mkdir(parents=True, exist_ok=True)
        self._free = [str(p) for p in root.iterdir() if p.is_dir()]
        numbers = [int(os.path.basename(p)) for p in self._free if os.path.basename(p).isdigit()]
        self._names = itertools.count(max(numbers, default=0) + 1)

    def __len__(self) -> int:
        return len(self._free)

    def make(self, path: str | Path) -> None:
        """Create directory `path` (which must not exist), from a spare when there is one."""
        while self._free:
            try:
                os.rename(self._free.pop(), path)
                return
            except FileNotFoundError:
                continue  # someone removed that spare; try the next
        os.mkdir(path)

    def remove(self, path: str | Path) -> None:
        """Delete directory `path`, or keep it as a spare when it qualifies."""
        if not self._keep(path):
            shutil.rmtree(path, ignore_errors=True)

    def _keep(self, path: str | Path) -> bool:
        if len(self._free) >= self.limit:
            return False
        try:
            with os.scandir(path) as scan:
                entries = list(scan)
            for e in entries:
                if e.name not in self.keep or not e.is_file(follow_symlinks=False):
                    return False
            if not all(_empty_if_unshared(e.path, e.name in self.blank) for e in entries):
                return False
            spare = os.path.join(self.root, str(next(self._names)))
            os.rename(path, spare)
        except OSError:
            return False
        self._free.append(spare)
        return True


# A file to blank larger than this is truncated after all (it is not an exit file).
_BLANK_MAX = 4096


def _empty_if_unshared(path: str, blank: bool = False) -> bool:
    """Empty the file (or blank it) unless another open file description refers to it."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except OSError:
            return False  # held open elsewhere (or leases are not allowed here)
        try:
            size = os.fstat(fd).st_size
            if blank and 0 < size <= _BLANK_MAX:
                os.pwrite(fd, b" " * (size - 1) + b"\n", 0)
            elif size:
                os.ftruncate(fd, 0)
        finally:
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return True
    finally:
        os.close(fd)
