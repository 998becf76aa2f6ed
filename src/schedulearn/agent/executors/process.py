"""The subprocess executor: a job is a process group on the agent's host.

Each run starts as a tiny `/bin/sh` shim that leads its own session and
process group, runs the job's argv in the foreground, and writes the
job's exit code to a file when it ends:

    sh -c 'trap : TERM INT HUP; "$@"; c=$?; printf "%4d\\n" "$c" 1<>"$0"; exit "$c"' \\
        EXIT_FILE ARGV...

The code is written in place (`1<>`: no truncation) at a fixed width,
because the exit file of a reused directory (`agent/spares.py`) still
holds the blanks its last job's code was overwritten with: on ext4,
truncating or deleting a file whose data is not yet on disk writes it
out first and waits for the disk (milliseconds per job, measured under
`bench/api_load.py` on a fresh machine), while overwriting it does not.

Why the shim: the job must survive a restart of the agent, and a
restarted agent is no longer the job's parent, so it cannot `wait()` for
its status. The shim's trap only defers SIGTERM until the job has ended
(a trap set to a command, unlike an ignored signal, is reset for the
job), so a cancelled job still gets its SIGTERM and its exit code is
still written. Output goes to files in the job's directory, never pipes,
for the same reason: a pipe to a dead agent would kill the job with
SIGPIPE. The agent tails those files line by line, and frees their blocks
(`executors.holes`) as far as the run's record says the output is kept
in its spool, so the raw files hold only what is not yet there: a job
printing without end costs the node its spool's cap, not more.

Run as its owner (`agent.accounts`): given an `Account`, the shim and
the job run with its uid, gid and supplementary groups, its HOME, USER
and LOGNAME, and umask 022; a job without a workdir starts in the
account's home. The agent opens the output files (0600, its own) and
hands the job their descriptors; the exit file and the progress file
are made beforehand and given to the account, in a directory that stays
the agent's, so the job can write them but reach nothing else there.

Environment (`agent.jobenv`, docs/job-environment.md): the agent's own
less `SCHEDULEARN_*`, with the job PATH (`--path`, else this interpreter's
directory first, so a job's `python` is the agent's), the account's
variables, then the launch plan's (`--env`, the job's env, Schedulearn's).

Containment (`agent.cgroups`): each run gets its own cgroup, with the
run's `cpus` as a CPU quota, `memory_gb` as a memory limit, the agent's
pids limit, and no access to the node's other GPUs' device nodes. The
shim starts gated (`GATED_SHIM`: it reads one line from a pipe before
anything else); the agent moves it into the cgroup and only then opens
the gate, so nothing of the job ever runs outside it. A job's processes
are then exactly the cgroup's members, whatever sessions they make
(`setsid`). An agent without cgroups (`--no-cgroups`, or none it may
make) runs the shim ungated, and a run is its process group.

Exit is observed through a pidfd, which works for a child and for a
re-adopted process alike. Cancel: SIGTERM to the whole cgroup (and the
group), a grace period, then SIGKILL of all of it. When the shim ends,
whatever is left in the cgroup is killed (freeze, kill, thaw; or
`cgroup.kill`) and the run counts as ended only once the cgroup is
empty: a stray would hold GPUs the scheduler is about to give to the
next job. A run the kernel's OOM killer hit ends with the message "out
of memory: limit N GB".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import BinaryIO

from schedulearn.agent import accounts, cgroupmounts, cgroups, jobenv
from schedulearn.agent.accounts import Account
from schedulearn.agent.cgroups import CgroupBackend, CgroupError, Limits, RunCgroup
from schedulearn.agent.config import AgentConfig
from schedulearn.agent.executors import holes
from schedulearn.agent.executors.base import (
    ExitStatus,
    LineSink,
    NewRecord,
    OutputLine,
    RunHandle,
    StartError,
    decode,
    signal_exit_code,
    split_lines,
)
from schedulearn.agent.gpus import device_numbers
from schedulearn.agent.launchers import LaunchError, plan_launch
from schedulearn.agent.progress import progress_file
from schedulearn.agent.state import EXIT_FILE, JobRecord
from schedulearn.agent.threadcalls import ThreadCalls
from schedulearn.agent.waits import wait_set
from schedulearn.core.capabilities import ExecutorKind
from schedulearn.protocol import Assignment, Executor, LogStream

log = logging.getLogger(__name__)

SHIM = 'trap : TERM INT HUP; "$@"; c=$?; printf "%4d\\n" "$c" 1<>"$0"; exit "$c"'
# Waits on stdin (a pipe) until the agent has put it in the run's cgroup; an
# agent that died first closes the pipe, and nothing of the job runs.
GATED_SHIM = "read -r go || exit 125; exec </dev/null; " + SHIM
# How long an emptied-but-not-yet cgroup is waited for between kill rounds
# (doubling up to the longest), and how often one that stays full is logged.
KILL_PAUSE = 0.01
KILL_PAUSE_MAX = 0.5
STUCK_LOG_SECONDS = 30.0
# How long a cgroup is killed at outside the agent's loop before giving up on it.
EMPTY_NOW_SECONDS = 10.0
# How long the cgroup of a job that failed to start is killed at.
START_KILL_SECONDS = 5.0
# How often a running job's log files are read; the exit wakes the reader at once.
POLL_SECONDS = 0.1
READ_CHUNK = 1 << 20
# A raw output file's read part is freed once this much more of it is kept.
FREE_STEP = 64 << 10
# How long a program found on the job PATH is taken as there, and how many
# (program, PATH) pairs are remembered.
FOUND_SECONDS = 30.0
FOUND_MEMORY = 1024


# Paths on the start and exit of every job are plain strings: pathlib cost
# about 15% of an agent's CPU under `bench/api_load.py`.
def log_file(job_dir: str, stream: LogStream) -> str:
    return os.path.join(job_dir, f"{stream.value}.log")


def is_job_shim(pid: int, record: JobRecord) -> bool:
    """Whether process `pid` is this run's shim (and not a process that got its pid since).

    The shim's argv names the run's exit file, which no other process's does.
    """
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return os.fsencode(exit_file(record)) in argv


def exit_file(record: JobRecord) -> str:
    return os.path.join(record.job_dir, EXIT_FILE)


class SubprocessExecutor:
    """Runs jobs as process groups on this host."""

    kind = Executor.SUBPROCESS
    runs = ExecutorKind.PROCESS
    runtime = ""

    def __init__(
        self,
        node_name: str,
        base_env: Mapping[str, str] | None = None,
        default_workdir: str | None = None,
        path: str | None = None,
        node_env: Mapping[str, str] | None = None,
        cgroups: CgroupBackend | None = None,
        pids_max: int = 0,
        gpu_devices: Mapping[int, tuple[int, int]] | None = None,
    ) -> None:
        """`base_env`: the agent's environment (default: this process's); `path`:
        the job PATH (default: `jobenv.job_path` of `base_env`'s); `node_env`:
        the agent's `--env` variables; `cgroups`: where runs get their cgroups
        (None: runs are process groups, uncontained); `pids_max`: each run's
        pids limit (0: none); `gpu_devices`: each GPU's device number, by index."""
        self.node_name = node_name
        self.cgroups = cgroups
        self.containment = f"cgroup {cgroups.version}" if cgroups is not None else "none"
        # The runs' cgroup calls, a thread trip per turn of the loop (`threadcalls`).
        self.thread_calls = ThreadCalls()
        self.pids_max = pids_max
        self.gpu_devices = dict(gpu_devices or {})
        source = os.environ if base_env is None else base_env
        self.path = jobenv.job_path(path, agent_env=source)
        # The agent's own variables less SCHEDULEARN_* (its credential above all).
        self._base_env = jobenv.base_env(self.path, source)
        self._node_env = dict(node_env or {})
        self._workdir_option = default_workdir
        self._default_workdir = default_workdir or os.getcwd()
        self.programs = ProgramMemo()

    async def start(
        self, assignment: Assignment, record: JobRecord, account: Account | None = None
    ) -> RunHandle:
        progress = progress_file(record)
        try:
            plan = plan_launch(
                assignment,
                record.checkpoint_dir,
                progress_file=progress,
                node_env=self._node_env,
            )
        except LaunchError as exc:
            raise StartError(str(exc)) from exc
        env = {**self._base_env, **(account.env() if account else {}), **plan.env}
        if account is None:
            workdir = assignment.workdir or self._default_workdir
        else:
            # The agent's own directory is no place for someone else's job: it
            # starts in its account's home, or in / as login does without one.
            home = account.home if os.path.isdir(account.home) else "/"
            workdir = assignment.workdir or self._workdir_option or home
        if not os.path.isdir(workdir):
            raise StartError(
                f"workdir {workdir!r} does not exist on node {self.node_name!r}; "
                "create it there or change the job's workdir"
            )
        program = plan.argv[0]
        if not self.programs.found(program, env.get("PATH", os.defpath)) and not (
            "/" in program and os.access(os.path.join(workdir, program), os.X_OK)
        ):
            raise StartError(
                f"program {program!r} was not found on node {self.node_name!r} (not on its "
                "PATH); install it there, give its full path, or run the job in a container "
                "image that has it"
            )
        if not os.path.isdir(record.checkpoint_dir):  # the runner made it already
            os.makedirs(record.checkpoint_dir, exist_ok=True)
        # The files the job itself writes, given to its account (it cannot make
        # files in the agent's directory); a spare directory's are given again,
        # so nothing passes between accounts.
        exit_path = exit_file(record)
        for path in (exit_path, progress):
            if account is not None or os.path.exists(path):
                accounts.job_file(path, account)
        # In a thread: on v1, making five directories and moving a process into
        # each waits on the kernel (RCU) for milliseconds, which the loop need not;
        # with the other starts of this turn (`threadcalls`), so that they report
        # together. Without cgroups no hop at all: such a start never leaves the
        # loop, so a work reply's starts report in one event batch (docs/results.md 6.17).
        cgroup = (
            None
            if self.cgroups is None
            else await self.thread_calls.call(self._cgroup, assignment, record)
        )
        argv = ["/bin/sh", "-c", SHIM if cgroup is None else GATED_SHIM, exit_path, *plan.argv]
        gate_read, gate = os.pipe() if cgroup is not None else (subprocess.DEVNULL, -1)
        out = _open_log(log_file(record.job_dir, LogStream.STDOUT))
        err = _open_log(log_file(record.job_dir, LogStream.STDERR))
        try:
            proc = subprocess.Popen(
                argv,
                stdin=gate_read,
                stdout=out,
                stderr=err,
                cwd=workdir,
                env=env,
                start_new_session=True,
                close_fds=True,
                user=None if account is None else account.uid,
                group=None if account is None else account.gid,
                # Always given with a user: without it the job keeps the agent's groups.
                extra_groups=None if account is None else list(account.groups),
                umask=-1 if account is None else accounts.JOB_UMASK,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            if cgroup is not None:
                os.close(gate)
                await _discard(cgroup)
            raise StartError(f"could not start the job on {self.node_name!r}: {exc}") from exc
        finally:
            os.close(out)
            os.close(err)
            if gate_read != subprocess.DEVNULL:
                os.close(gate_read)
        if cgroup is not None:
            try:
                await self.thread_calls.call(cgroup.add, proc.pid)
                os.write(gate, b"go\n")
            except OSError as exc:
                proc.kill()
                proc.wait()
                await _discard(cgroup)
                raise StartError(
                    f"could not put the job in its cgroup on {self.node_name!r}: {exc}"
                ) from exc
            finally:
                os.close(gate)
        record.pid = proc.pid
        return ProcessHandle(record, proc, thread_calls=self.thread_calls)

    def _cgroup(self, assignment: Assignment, record: JobRecord) -> RunCgroup | None:
        """The run's cgroup with its limits, named in its record (None: no cgroups)."""
        if self.cgroups is None:
            return None
        own = set(assignment.gpus)
        limits = Limits(
            cpus=assignment.cpus,
            memory_bytes=int(assignment.memory_gb * cgroups.GIB),
            pids=self.pids_max,
            denied_devices=tuple(n for i, n in sorted(self.gpu_devices.items()) if i not in own),
        )
        try:
            cgroup = self.cgroups.create(f"{record.job_id}.{record.attempt}", limits)
        except CgroupError as exc:
            raise StartError(f"{exc} (node {self.node_name!r})") from exc
        record.cgroup = list(cgroup.dirs)
        return cgroup

    async def recover(
        self, records: list[JobRecord], new_record: NewRecord | None = None
    ) -> list[RunHandle]:
        handles: list[RunHandle] = []
        for record in records:
            if record.executor is not self.kind:
                continue
            handles.append(await ProcessHandle.adopt(record))
        # In a thread: emptying a cgroup waits (up to EMPTY_NOW_SECONDS each), and
        # the agent's loop keeps its heartbeats and lease renewals meanwhile.
        await asyncio.to_thread(self._sweep, {d for r in records for d in r.cgroup})
        return handles

    def _sweep(self, named: set[str]) -> None:
        """Kill and remove the run cgroups under this agent's base that no record
        names: left by an agent killed between making one and saving its record,
        or after a record was dropped. Only this agent's runs live there."""
        if self.cgroups is None:
            return
        for cgroup in self.cgroups.runs():
            if not named.intersection(cgroup.dirs):
                if not cgroup.empty():
                    log.warning("killing processes of a run no record names: %s", cgroup.dirs[0])
                cgroup.empty_and_remove(EMPTY_NOW_SECONDS)

    def describe_containment(self) -> str:
        """What start-up says of it: the cgroup version, where, and the limits enforced."""
        if self.cgroups is None:
            return "none: each run is a process group, without limits (--no-cgroups)"
        return self.cgroups.describe()

    async def close(self) -> None:
        if self.cgroups is not None:
            self.cgroups.close()


class ProgramMemo:
    """Whether a program is on a PATH, with the programs found remembered.

    A program found is not looked up again for `seconds`: the lookup is a
    stat per PATH entry, about 5% of an agent's CPU when it starts hundreds
    of jobs a second. One not found is looked up each time, so a program
    installed after a refusal is found at once. Should a remembered one
    vanish, the shim's `sh` says so in the job's stderr and the job fails
    with 127.
    """

    def __init__(
        self, seconds: float = FOUND_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds = seconds
        self._clock = clock
        self._until: dict[tuple[str, str], float] = {}  # (program, PATH) -> until when

    def found(self, program: str, path: str) -> bool:
        key = (program, path)
        now = self._clock()
        if self._until.get(key, -math.inf) > now:
            return True
        if shutil.which(program, path=path) is None:
            return False
        if len(self._until) >= FOUND_MEMORY:
            self._until.clear()
        self._until[key] = now + self.seconds
        return True


class ProcessHandle:
    """One run of a job as a process group (our child, or re-adopted)."""

    def __init__(
        self,
        record: JobRecord,
        proc: subprocess.Popen[bytes] | None,
        ended: ExitStatus | None = None,
        thread_calls: ThreadCalls | None = None,
    ) -> None:
        """`thread_calls`: where its cgroup is removed, with the other runs' that
        end in the same turn (None: a thread trip of its own)."""
        self.record = record
        self._thread_calls = thread_calls
        self._proc = proc
        self._status = ended
        self._exited = asyncio.Event()
        self._pidfd: int | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.cgroup = RunCgroup(record.cgroup) if record.cgroup else None
        self._emptying: asyncio.Task[None] | None = None
        if ended is not None:
            self._exited.set()
        elif record.pid is not None:
            try:
                self._pidfd = os.pidfd_open(record.pid)
            except ProcessLookupError:
                self._finish()

    @classmethod
    async def adopt(cls, record: JobRecord) -> ProcessHandle:
        """A handle for a run an earlier agent process started."""
        if record.ended:
            return cls(record, None, ExitStatus(record.exit_code, record.exit_message))
        if record.pid is None:
            # A gated shim saw its pipe close and ran nothing; empty its cgroup anyway
            # (in a thread: it waits, and the loop does not).
            if record.cgroup:
                await asyncio.to_thread(
                    RunCgroup(record.cgroup).empty_and_remove, EMPTY_NOW_SECONDS
                )
            return cls(
                record, None, ExitStatus(None, "the agent stopped while it was starting the job")
            )
        handle = cls(record, None)
        # The pidfd was opened first, so this check cannot race a pid reuse.
        if handle._status is None and not is_job_shim(record.pid, record):
            handle._finish()
        return handle

    # --- exit ----------------------------------------------------------------

    def is_alive(self) -> bool:
        return self._status is None

    async def wait(self) -> ExitStatus:
        if self._status is None and self._pidfd is not None:
            if self._waiter is None:
                loop = asyncio.get_running_loop()
                self._waiter = loop.create_future()
                loop.add_reader(self._pidfd, self._on_pidfd, loop)
            await asyncio.shield(self._waiter)
        await self._exited.wait()
        assert self._status is not None
        return self._status

    def _on_pidfd(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._pidfd is not None:
            loop.remove_reader(self._pidfd)
        self._finish()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _finish(self) -> None:
        """The shim has ended: learn the exit code and clear up its group and cgroup."""
        if self._status is not None or self._emptying is not None:
            return
        returncode = self._proc.wait() if self._proc is not None else None
        code = _read_exit_file(exit_file(self.record))
        message = ""
        if code is None and returncode is not None:
            code = signal_exit_code(-returncode) if returncode < 0 else returncode
        elif code is None:
            message = (
                "the job ended while the agent was not running and left no exit status "
                "(it was probably killed with SIGKILL)"
            )
        self._kill_strays()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if self.cgroup is None:
            self._end(ExitStatus(code, message))
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # built outside the agent's loop: empty it here and now
            oom = self.cgroup.empty_and_remove(EMPTY_NOW_SECONDS)
            self._end(ExitStatus(code, f"{oom}; {message}" if oom and message else oom or message))
            return
        self._emptying = loop.create_task(self._empty_then_end(self.cgroup, code, message))

    async def _empty_then_end(self, cgroup: RunCgroup, code: int | None, message: str) -> None:
        """Kill what is left in the cgroup, wait until it is empty, then end the run:
        only then are its GPUs reported free."""
        pause, stuck_since = KILL_PAUSE, time.monotonic()
        while not cgroup.empty():
            # In a thread: a v1 round waits for the freezer (up to half a second,
            # again each round for a stuck cgroup); heartbeats must not wait with it.
            await asyncio.to_thread(cgroup.kill_round)
            await asyncio.sleep(pause)
            pause = min(pause * 2, KILL_PAUSE_MAX)
            if time.monotonic() - stuck_since > STUCK_LOG_SECONDS:
                log.warning(
                    "job %s: its cgroup %s does not empty (a process in uninterruptible "
                    "sleep?); its GPUs stay held until it does",
                    self.record.job_id,
                    cgroup.dirs[0],
                )
                stuck_since = time.monotonic()
        # rmdir waits on the kernel (v1); with the other runs that ended in this
        # turn of the loop, so that their exits are reported together.
        calls = self._thread_calls
        if calls is None:
            oom = await asyncio.to_thread(cgroup.finish)
        else:
            oom = await calls.call(cgroup.finish)
        self._end(ExitStatus(code, f"{oom}; {message}" if oom and message else oom or message))

    def _end(self, status: ExitStatus) -> None:
        self._status = status
        self._exited.set()

    def _kill_strays(self) -> None:
        pgid = self.record.pid
        # Once the shim is gone its pid may belong to a new process; then the
        # number names someone else's group and is left alone.
        if pgid is None or os.path.exists(f"/proc/{pgid}"):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)

    # --- stop ----------------------------------------------------------------

    async def stop(self, grace_seconds: float) -> None:
        pgid = self.record.pid
        if self._status is not None or pgid is None:
            return
        await self._signal(pgid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self.wait()), timeout=max(0.0, grace_seconds))
        except TimeoutError:
            log.info(
                "job %s ignored SIGTERM for %.1fs; killing it", self.record.job_id, grace_seconds
            )
            await self._signal(pgid, signal.SIGKILL)
            await self.wait()

    async def _signal(self, pgid: int, signum: int) -> None:
        """`signum` to the run: every member of its cgroup, and its process group."""
        if self.cgroup is not None:
            # In a thread: a v1 kill round waits for the freezer.
            if signum == signal.SIGKILL:
                await asyncio.to_thread(self.cgroup.kill_round)
            else:
                await asyncio.to_thread(self.cgroup.signal, signum)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)

    async def cleanup(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    # --- output ----------------------------------------------------------------

    async def pump_logs(self, sink: LineSink) -> None:
        record = self.record

        def kept(stream: LogStream) -> Callable[[], int]:
            # What the record stores is in the spool for good (a restarted
            # agent resumes from there), so the raw file before it can go.
            return lambda: record.log_positions.get(stream.value, 0)

        tails = [
            _FileTail(log_file(record.job_dir, s), s, record.log_positions.get(s.value, 0), kept(s))
            for s in (LogStream.STDOUT, LogStream.STDERR)
        ]
        try:
            while True:
                # Wait first: a run just started has written nothing yet, and
                # one that ends within the poll is read once, at its end.
                ended = await wait_set(self._exited, POLL_SECONDS)
                for tail in tails:
                    tail.read(sink, final=ended)
                if ended:
                    return
        finally:
            for tail in tails:
                tail.close()


class _FileTail:
    """Reads one output file from a byte offset, a line at a time, and frees
    its blocks up to where `kept()` says it is kept elsewhere."""

    def __init__(self, path: str, stream: LogStream, offset: int, kept: Callable[[], int]) -> None:
        self.path = path
        self.stream = stream
        self.offset = offset
        self._file: BinaryIO | None = None
        self._kept = kept
        self._freed = 0
        self._writer: int | None = None
        self._can_free = True

    def read(self, sink: LineSink, final: bool) -> None:
        if self._file is None:
            # Opened once there is something to read: most short runs print
            # nothing, and a stat costs a fifth of opening a buffered file.
            try:
                if os.stat(self.path).st_size <= self.offset:
                    return
                self._file = open(self.path, "rb")  # noqa: SIM115 - kept open across reads
            except FileNotFoundError:
                return
        f = self._file
        self._free_kept()
        while True:
            f.seek(self.offset)
            data = f.read(READ_CHUNK)
            lines = split_lines(data, final=final and len(data) < READ_CHUNK) if data else []
            if not lines:
                break
            now = time.time()
            for line, end in lines:
                sink(OutputLine(self.stream, decode(line), now, self.offset + end))
            self.offset += lines[-1][1]
            self._free_kept()
        if final:
            self.close()

    def _free_kept(self) -> None:
        # Never past what was read: the record cannot be ahead of it anyway.
        end = min(self._kept(), self.offset)
        if not self._can_free or end - self._freed < FREE_STEP:
            return
        try:
            if self._writer is None:
                # The agent's own file (0600), even when the job runs as another account.
                self._writer = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            self._freed = max(self._freed, holes.punch(self._writer, end))
        except OSError as exc:
            self._can_free = False
            log.warning(
                "cannot free the read part of %s (%s): it keeps its blocks until the run ends",
                self.path,
                exc,
            )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            os.close(self._writer)
            self._writer = None


async def _discard(cgroup: RunCgroup) -> None:
    """Empty and remove the cgroup of a run that did not start, in a thread (it
    waits). It never raises: the start's own error is what the caller reports,
    and a cgroup that will not go (EBUSY) is logged, not raised in its place."""
    try:
        await asyncio.to_thread(cgroup.empty_and_remove, START_KILL_SECONDS)
    except Exception:
        log.exception("could not clear the cgroup %s of a job that did not start", cgroup.dirs[0])


def _open_log(path: str) -> int:
    """An output file for appending, the agent's and 0600 (the job gets the descriptor)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def _read_exit_file(path: str) -> int | None:
    # A file object would cost four more system calls (fstat, isatty, seeks).
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = os.read(fd, 64).strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return int(text)
    except ValueError:
        return None


def build(config: AgentConfig) -> SubprocessExecutor:
    """The executor as `executors.registry` offers it, with its runs' cgroups."""
    return SubprocessExecutor(
        config.name,
        default_workdir=config.workdir,
        path=config.job_path,
        node_env=config.job_env,
        cgroups=_containment(config),
        pids_max=config.job_pids_max,
        gpu_devices=device_numbers(config.gpu_devices),
    )


def _containment(config: AgentConfig) -> CgroupBackend | None:
    try:
        return cgroupmounts.for_agent(config)
    except CgroupError as exc:
        raise StartError(str(exc)) from exc
