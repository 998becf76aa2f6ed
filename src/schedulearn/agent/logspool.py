"""An attempt's complete output on the agent's disk: `<job_dir>/output.log`.

Every line an executor reads goes here first, in arrival order, before
anything is shipped (`agent.shipper` reads it back from here). So the
agent never holds a job's output in memory, never drops a line because
the server is slow or away, and keeps the attempt's whole output, which
it uploads to the server when the server has had to cut the job's stored
log (`logs --full`).

One line per output line: `o` or `e` (stdout, stderr), the time read
(seconds, 6 decimals), a space, the text (which never holds a newline:
executors split on them):

    o1732441200.123456 epoch 3 loss 0.412

The spool has a cap (`log_disk_max_bytes` of the agent's settings) so
one job cannot fill the node's disk: past it, lines are counted, not
kept, and marker lines say so where the cut starts and, at the end,
exactly how many bytes and lines were not kept.

Crash consistency: `checkpoint()` flushes the file and returns the size
and the per-stream source positions it covers; the caller stores both
in the job's record at once. A restarted agent truncates the spool to
that size and re-reads its sources from those positions, so a line is
neither lost nor written twice.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from schedulearn.protocol import LOG_LINE_MAX_CHARS, LogLine, LogStream

SPOOL_FILE = "output.log"
_CODE = {LogStream.STDOUT: b"o", LogStream.STDERR: b"e"}
_STREAM = {ord("o"): LogStream.STDOUT, ord("e"): LogStream.STDERR}


def spool_path(job_dir: str) -> str:
    return os.path.join(job_dir, SPOOL_FILE)


def encode(stream: LogStream, at: float, text: str) -> bytes:
    body = text.replace("\n", " ").encode("utf-8", errors="replace")
    return _CODE[stream] + f"{at:.6f} ".encode() + body + b"\n"


def parse(raw: bytes) -> tuple[LogStream, float, str]:
    """One spool line (without its newline) -> (stream, time, text).

    The text is what the wire takes whatever the file holds: valid UTF-8,
    no NUL, a finite time (`wire` builds the line without validating it).
    """
    head, _, text = raw.partition(b" ")
    stream = _STREAM.get(head[0], LogStream.STDOUT) if head else LogStream.STDOUT
    try:
        at = float(head[1:])
    except ValueError:
        at = 0.0
    if not math.isfinite(at):
        at = 0.0
    return stream, at, text.decode("utf-8", errors="replace").replace("\x00", "\ufffd")


@dataclass(frozen=True, slots=True)
class SpoolMark:
    """What a record stores: the spool's size and the sources it covers."""

    size: int
    positions: dict[str, int]
    cut_bytes: int
    cut_lines: int


class LogSpool:
    """Appends lines (`add`) and reads them back (`read`); one per run."""

    def __init__(
        self,
        path: str | Path,
        cap_bytes: int,
        mark: SpoolMark | None = None,
        node: str = "",
    ) -> None:
        self.path = path
        self.cap_bytes = cap_bytes
        self.node = node
        mark = mark or SpoolMark(0, {}, 0, 0)
        self.size = mark.size
        self.positions = dict(mark.positions)
        self.cut_bytes = mark.cut_bytes
        self.cut_lines = mark.cut_lines
        self._out: BinaryIO | None = None
        self._in: BinaryIO | None = None
        self._dirty = False
        if os.path.exists(path):
            # Whatever was written after the last checkpoint is read again
            # from the sources; a fresh run starts empty.
            with open(path, "r+b") as f:
                if os.fstat(f.fileno()).st_size != self.size:
                    f.truncate(self.size)

    # --- writing -------------------------------------------------------------

    def add(self, stream: LogStream, at: float, text: str, position: int) -> None:
        """Keep one line (or count it, past the cap); `position` resumes its source."""
        if position >= 0:
            self.positions[stream.value] = position
        data = encode(stream, at, text)
        if self.cut_lines or self.size + len(data) > self.cap_bytes:
            if not self.cut_lines:
                self._write(
                    encode(
                        LogStream.STDERR,
                        at,
                        f"[schedulearn: this job's output passed the per-job disk cap of "
                        f"{self.cap_bytes} bytes on node {self.node!r}; what follows is "
                        "counted, not kept, until its end]",
                    )
                )
            self.cut_bytes += len(data)
            self.cut_lines += 1
            return
        self._write(data)

    def finish(self, at: float) -> None:
        """The run's output has ended: name exactly what the cap cut, if anything."""
        if self.cut_lines:
            self._write(
                encode(
                    LogStream.STDERR,
                    at,
                    f"[schedulearn: {self.cut_bytes} bytes ({self.cut_lines} lines) of output "
                    f"past the per-job disk cap of {self.cap_bytes} bytes on node "
                    f"{self.node!r} were not kept]",
                )
            )
            # Said once: a restarted agent must not say it again.
            self.cut_lines = 0
            self.cut_bytes = 0

    def _write(self, data: bytes) -> None:
        if self._out is None:
            # Opened on the first line: a job without output makes no file.
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._out = os.fdopen(fd, "wb", buffering=1 << 16)
            self._out.seek(self.size)
        self._out.write(data)
        self.size += len(data)
        self._dirty = True

    def flush(self) -> None:
        if self._out is not None and self._dirty:
            self._out.flush()
            self._dirty = False

    def checkpoint(self) -> SpoolMark:
        """Flush, and say what a record must store to resume exactly here."""
        self.flush()
        return SpoolMark(self.size, dict(self.positions), self.cut_bytes, self.cut_lines)

    # --- reading -------------------------------------------------------------

    def read(
        self, offset: int, max_lines: int, max_bytes: int = 4 << 20
    ) -> list[tuple[bytes, int]]:
        """Up to `max_lines` whole lines from byte `offset`, each with the offset after it."""
        if offset >= self.size:
            return []
        self.flush()
        if self._in is None:
            self._in = open(self.path, "rb")  # noqa: SIM115 - kept open across reads
        self._in.seek(offset)
        data = self._in.read(min(max_bytes, self.size - offset))
        lines: list[tuple[bytes, int]] = []
        start = 0
        while len(lines) < max_lines:
            end = data.find(b"\n", start)
            if end < 0:
                break
            lines.append((data[start:end], offset + end + 1))
            start = end + 1
        if not lines and data and b"\n" not in data:
            # One line longer than `max_bytes` (never written by `add`): skip it whole.
            return [(data[:max_bytes], offset + len(data))]
        return lines

    def wire(self, raw: bytes, seq: int) -> LogLine:
        # Not validated: `parse` gives only what the wire takes, and the cut
        # keeps a damaged spool's overlong line within the server's limit.
        # Validating each line (the NUL walk above all) was a quarter of an
        # agent's CPU while it shipped a flood of output.
        stream, at, text = parse(raw)
        return LogLine.model_construct(
            seq=seq, stream=stream, text=text[:LOG_LINE_MAX_CHARS], at=at
        )

    def close(self) -> None:
        for f in (self._out, self._in):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        self._out = self._in = None
