"""The lease guard: stops this node's jobs when its lease lapses, agent or no agent.

    python -m schedulearn.agent.leaseguard STATE_DIR

A job outlives its agent (an upgrade or a crash must not end a week of
training), so something that also outlives the agent must stop the job
once the server may run it elsewhere. The agent starts this small
process (its own session, standard library only) and writes its lease
to `STATE_DIR/lease` at every renewal (`agent.lease`). The guard sleeps
until the lease's end, reads the file again (renewed: sleep on), and
when it has lapsed stops every run the agent's records list whose shim
still runs or whose cgroup still has a process: it marks the run's
directory (`lease_stopped`), sends SIGTERM to the run's process group and
to every member of its cgroup, waits the lease's grace, then kills the
whole cgroup (`agent.cgroups`: freeze, SIGKILL each member, thaw; or
`cgroup.kill`) until it is empty, and removes it. So a child that left
the job's session (`setsid`) ends with it. Whether the agent is frozen,
killed or only cut off from the server makes no difference: the guard
does not ask it.

One guard per state directory (an exclusive `flock` on
`STATE_DIR/lease.guard`; a second one waits for the first to end). It
ends once the lease has lapsed and no run is left to stop, or when the
lease file is removed (the agent left with nothing running); the agent
starts another when it renews a lease and finds none. What it did goes
to `STATE_DIR/leaseguard.log`.

Container runs are stopped with the `docker` command-line client when
the host has one (`docker stop -t GRACE`); process runs with signals.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from schedulearn.agent import lease as leases
from schedulearn.agent.cgroups import RunCgroup

LOCK_FILE = "lease.guard"
LOG_FILE = "leaseguard.log"
# Longest sleep between two reads of the lease file: a renewal is seen within it.
LONGEST_NAP = 1.0
# How long one stop keeps killing a cgroup's members before looking at the lease again.
KILL_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Run:
    """A run the agent's records list as not ended (what the guard needs of a `JobRecord`)."""

    job_id: int
    attempt: int
    job_dir: str
    pid: int | None
    container_id: str | None
    # The run's cgroup directories (none: an agent without cgroups, or a container).
    cgroup: tuple[str, ...] = ()

    @property
    def exit_file(self) -> Path:
        return Path(self.job_dir) / "exit_code"


def runs(state_dir: Path) -> list[Run]:
    """The runs in the agent's records that have not ended (read-only, no lock taken)."""
    db = state_dir / "agent.db"
    if not db.exists():
        return []
    found = []
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
        for (text,) in conn.execute("SELECT record FROM runs"):
            try:
                data = json.loads(text)
                if data.get("ended_at") is not None:
                    continue
                found.append(
                    Run(
                        int(data["job_id"]),
                        int(data["attempt"]),
                        str(data["job_dir"]),
                        data.get("pid"),
                        data.get("container_id"),
                        tuple(str(d) for d in data.get("cgroup") or ()),
                    )
                )
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # unreadable: the agent skips it too
    return found


def shim_alive(run: Run) -> bool:
    """Whether the run's shim still runs (its argv names the run's exit file, so a
    process that got its pid since does not count)."""
    if run.pid is None:
        return False
    try:
        argv = Path(f"/proc/{run.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return os.fsencode(str(run.exit_file)) in argv


def cgroup_busy(run: Run) -> bool:
    """Whether a process is left in the run's cgroup (the shim's, or one that escaped it)."""
    return bool(run.cgroup) and not RunCgroup(run.cgroup).empty()


def running(found: list[Run]) -> list[Run]:
    """The runs still to stop: a process whose shim runs or whose cgroup is not
    empty, a container not stopped yet."""
    return [
        r
        for r in found
        if shim_alive(r)
        or cgroup_busy(r)
        or (r.container_id and not leases.stopped_by_lease(r.job_dir))
    ]


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def stop(found: list[Run], grace: float, log: _Log) -> None:
    """Mark, SIGTERM, wait up to `grace`, SIGKILL: every run in `found`."""
    why = (
        "stopped because this node's lease lapsed (the agent could not renew it with the "
        "server); the server runs the job elsewhere"
    )
    processes = []
    for run in found:
        with contextlib.suppress(OSError):
            leases.mark_stopped(run.job_dir, why)
        if run.container_id:
            log.write(f"lease lapsed: stopping container of job {run.job_id}.{run.attempt}")
            _stop_container(run.container_id, grace, log)
        elif run.pid is not None or run.cgroup:
            log.write(f"lease lapsed: SIGTERM to job {run.job_id}.{run.attempt} (pid {run.pid})")
            if run.pid is not None:
                _signal_group(run.pid, signal.SIGTERM)
            if run.cgroup:
                RunCgroup(run.cgroup).signal(signal.SIGTERM)
            processes.append(run)
    deadline = time.monotonic() + grace
    while processes and time.monotonic() < deadline:
        time.sleep(0.05)
        processes = [r for r in processes if shim_alive(r) or cgroup_busy(r)]
    for run in processes:
        log.write(f"job {run.job_id}.{run.attempt} outlived its grace ({grace:g}s): SIGKILL")
        if run.pid is not None:
            _signal_group(run.pid, signal.SIGKILL)
    for run in found:
        if not run.cgroup:
            continue
        cgroup = RunCgroup(run.cgroup)
        if not cgroup.kill_sync(KILL_SECONDS):
            log.write(f"the cgroup of job {run.job_id}.{run.attempt} is not empty yet")
            continue
        # Emptied: removed here (a restarted agent finds it gone, and the run ended).
        with contextlib.suppress(OSError):
            cgroup.remove()


def _stop_container(container_id: str, grace: float, log: _Log) -> None:
    docker = shutil.which("docker")
    if docker is None:
        log.write(f"no docker client on this host: container {container_id} is left running")
        return
    try:
        subprocess.run(
            [docker, "stop", "-t", str(max(0, round(grace))), container_id],
            capture_output=True,
            timeout=grace + 30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.write(f"could not stop container {container_id}: {exc}")


class _Log:
    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with contextlib.suppress(OSError), self.path.open("a") as f:
            f.write(f"{stamp} leaseguard[{os.getpid()}]: {line}\n")


def guard(state_dir: Path) -> int:
    """Enforce the lease of the agent whose state directory is `state_dir` (see above)."""
    log = _Log(state_dir / LOG_FILE)
    lock = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # a second guard waits here for the first to end
    log.write(f"guarding {state_dir}")
    while True:
        lease = leases.read(state_dir)
        if lease is None:
            log.write("no lease to enforce; exiting")
            return 0
        left = lease.left(leases.now())
        if left > 0:
            time.sleep(min(left, LONGEST_NAP))
            continue
        try:
            live = running(runs(state_dir))
        except (sqlite3.Error, OSError, ValueError, KeyError, TypeError) as exc:
            # Busy or half-written: look again soon; giving up would leave the jobs running.
            log.write(f"could not read the agent's records: {exc!r}; trying again")
            time.sleep(0.1)
            continue
        if not live:
            log.write("lease lapsed with no run left to stop; exiting")
            return 0
        stop(live, lease.grace, log)


def guard_running(state_dir: Path) -> bool:
    """Whether a guard holds this state directory's lock (the agent asks before starting one)."""
    try:
        fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the lock if it was taken here
    return False


def spawn(state_dir: Path) -> subprocess.Popen[bytes]:
    """Start a guard for `state_dir` in a session of its own (it outlives the agent)."""
    return subprocess.Popen(
        [sys.executable, "-m", "schedulearn.agent.leaseguard", str(state_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m schedulearn.agent.leaseguard STATE_DIR", file=sys.stderr)
        return 2
    return guard(Path(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
