"""The executor interface: start a job, follow its output, stop it, find it again.

Every executor (a process group on the host, a Docker or Podman
container) gives the agent the same things:

- `Executor.start(assignment, record, account)` starts one run as the
  unix `account` (None: as the agent's own user; `agent.accounts`) and
  returns a `RunHandle`; it raises `StartError`, whose message says what to change,
  when the job cannot start (unknown program, missing image, bad workdir);
- `Executor.recover(records)` finds the runs of earlier agent processes on
  this host and returns handles for those still there (running or ended);
- a `RunHandle` pumps output lines to a sink, waits for the exit, stops
  the run (SIGTERM, a grace period, SIGKILL) and cleans up after it.

Output lines carry a resume position per stream, so a restarted agent
continues a job's log where the last acknowledged batch ended.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from schedulearn.agent.accounts import Account
from schedulearn.agent.state import JobRecord
from schedulearn.core.capabilities import ExecutorKind
from schedulearn.protocol import Assignment, Executor, LogStream

# Exit codes follow the shell's convention: 128 + signal for a killed job.
SIGNAL_EXIT_BASE = 128
# One log line is cut at this many characters; a job printing a progress
# bar without newlines must not grow one line without bound.
MAX_LINE_CHARS = 16_384


class StartError(RuntimeError):
    """The job could not start; the message says what the user should change."""


@dataclass(frozen=True, slots=True)
class OutputLine:
    """One line of a job's output; `position` resumes the stream after it."""

    stream: LogStream
    text: str
    at: float
    position: int


LineSink = Callable[[OutputLine], None]
NewRecord = Callable[[int, int, str], JobRecord]
"""Makes a record for a run found without one: (job id, attempt, container id)."""


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How a run ended. `exit_code` is None when it could not be learned."""

    exit_code: int | None
    message: str = ""


class RunHandle(Protocol):
    record: JobRecord

    async def pump_logs(self, sink: LineSink) -> None:
        """Feed output lines to `sink` from `record.log_positions` on, until the
        run has ended and its output is read to the end."""
        ...

    async def wait(self) -> ExitStatus:
        """Wait for the run to end."""
        ...

    def is_alive(self) -> bool: ...

    async def stop(self, grace_seconds: float) -> None:
        """SIGTERM (or the container's stop signal), then SIGKILL after the grace."""
        ...

    async def cleanup(self) -> None:
        """Release what the ended run left behind (a container, stray processes)."""
        ...


class ExecutorImpl(Protocol):
    kind: Executor
    # What it runs a job as (the node's capabilities list these), and the
    # container runtime it reached ("" for an executor that needs none).
    runs: ExecutorKind
    runtime: str
    # What confines its runs, as the node reports it: "cgroup v1", "cgroup v2",
    # "container" (the engine's own cgroup), or "none".
    containment: str

    async def start(
        self, assignment: Assignment, record: JobRecord, account: Account | None = None
    ) -> RunHandle: ...

    async def recover(
        self, records: list[JobRecord], new_record: NewRecord | None = None
    ) -> list[RunHandle]:
        """Handles for this executor's runs among `records`, ended or not. An
        executor that can find runs without a record (containers, by label)
        makes one for each with `new_record`."""
        ...

    async def close(self) -> None: ...


def signal_exit_code(signum: int) -> int:
    return SIGNAL_EXIT_BASE + signum


def split_lines(buffer: bytes, final: bool) -> list[tuple[bytes, int]]:
    """The complete lines of `buffer`, each with the offset just after it.

    The unfinished rest stays unread (the caller keeps it for the next
    read) unless `final` says the stream has ended. Lines are cut at
    `MAX_LINE_CHARS` bytes, so a stream without newlines still flows.
    """
    lines: list[tuple[bytes, int]] = []
    start = 0
    size = len(buffer)
    while start < size:
        end = buffer.find(b"\n", start, start + MAX_LINE_CHARS + 1)
        if end >= 0:
            line, start = buffer[start:end], end + 1
        elif size - start > MAX_LINE_CHARS:
            line, start = buffer[start : start + MAX_LINE_CHARS], start + MAX_LINE_CHARS
        elif final:
            line, start = buffer[start:], size
        else:
            break
        lines.append((line[:-1] if line.endswith(b"\r") else line, start))
    return lines


def decode(line: bytes) -> str:
    """Output bytes as text: invalid UTF-8 and NUL (which neither JSON text nor
    PostgreSQL keeps) become U+FFFD."""
    return line.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
