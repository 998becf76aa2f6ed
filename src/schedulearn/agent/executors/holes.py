"""Giving back the disk space of the part of a file that is no longer needed.

A job's raw output files (`executors.process`) are written by the job
with O_APPEND for as long as it runs, and read by the agent from a byte
offset that only grows. Once the agent's record says the output up to
an offset is kept elsewhere (in the run's spool, `agent.logspool`), the
blocks before it are freed with `fallocate(FALLOC_FL_PUNCH_HOLE |
FALLOC_FL_KEEP_SIZE)`: the file keeps its size and its offsets (the job's
appends and the agent's reads go on as before; a read of the hole gives
zeros, and nothing reads there again) while its blocks go back to the
filesystem. Truncating instead would race the job's next write and lose it.

ext4, XFS, Btrfs and tmpfs support it; where the filesystem does not,
`punch` raises `Unsupported` and the caller stops trying: the file then
keeps its blocks until the run ends, as it did before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
from typing import Any

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
# Freed in whole blocks: a partial block at either end is zeroed, not freed.
BLOCK = 4096


class Unsupported(OSError):
    """The filesystem (or the platform) cannot punch holes: stop trying on this file."""


@functools.cache
def _fallocate() -> Any:
    """libc's fallocate(2), loaded once (None outside glibc-like platforms)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    fn = getattr(libc, "fallocate", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        fn.restype = ctypes.c_int
    return fn


def punch(fd: int, end: int) -> int:
    """Free the whole blocks of the file `fd` (open for writing) before byte `end`;
    returns the bytes freed from the start. Raises `Unsupported` where the
    filesystem cannot, OSError for any other failure."""
    length = end - end % BLOCK
    if length <= 0:
        return 0
    fn = _fallocate()
    if fn is None:
        raise Unsupported(errno.ENOSYS, "fallocate is not available on this platform")
    if fn(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, 0, length) != 0:
        code = ctypes.get_errno()
        kind = Unsupported if code in (errno.EOPNOTSUPP, errno.ENOSYS) else OSError
        raise kind(code, os.strerror(code))
    return length
