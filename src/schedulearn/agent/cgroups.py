"""One cgroup per run: where a process job's processes live, what bounds them, how they end.

A run's processes are exactly the members of its cgroup: a child that
leaves the job's process group or session (`setsid`) stays in it, so
stopping the cgroup stops all of them, and a run counts as ended (its
GPUs free) only once the cgroup is empty. Two backends sit behind one
interface (`CgroupBackend.create(name, limits) -> RunCgroup`):

- `V1Cgroups`: one directory per v1 hierarchy (freezer, cpu, memory,
  pids, devices), each under the agent's own cgroup of that hierarchy;
- `V2Cgroups`: one directory in the unified hierarchy, under the agent's
  own cgroup, with the controllers that cgroup can hand down.

Limits (`Limits`): the run's `cpus` as a CFS quota, `memory_gb` as the
memory limit (swap included where the kernel accounts it), a pids limit,
and the character devices (major, minor) the run may not open: every GPU
of the node but its own: `devices.deny` on v1, a BPF device program on v2
(`agent.devicefilter`; where the kernel refuses one, the backend says that
devices are not enforced).

Stopping (`RunCgroup.kill_round`, repeated until `empty()`): v2 writes
`cgroup.kill`; v1 freezes the freezer cgroup (so nothing forks between
the listing and the signals), sends SIGKILL to every member, and thaws
(the signals are delivered then). A run's `RunCgroup` is rebuilt from its
directories alone (`RunCgroup(dirs)`), which the run's record keeps: a
restarted agent and the lease guard (`agent.leaseguard`, standard
library only, like this module) stop a run they did not start.

`agent.cgroupmounts.detect(mode, scope)` finds what this host mounts and
makes the backend.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Literal, Protocol

from schedulearn.agent import devicefilter

log = logging.getLogger(__name__)

Mode = Literal["auto", "v1", "v2"]
# v1 hierarchies a run gets a directory in; the freezer is what makes a kill exact.
V1_CONTROLLERS = ("freezer", "cpu", "memory", "pids", "devices")
V2_CONTROLLERS = ("cpu", "memory", "pids")
CFS_PERIOD_US = 100_000
GIB = 1024**3


class CgroupError(RuntimeError):
    """The agent cannot make cgroups here; the message says what to change."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one run may use; 0 (or nothing) means no limit of that kind."""

    cpus: float = 0.0
    memory_bytes: int = 0
    pids: int = 0
    # Character devices (major, minor) the run may not open: the node's other GPUs.
    denied_devices: tuple[tuple[int, int], ...] = ()


def write(path: str, text: str) -> None:
    """Write a cgroup file in one write(2), as the kernel wants it."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def read(path: str) -> str:
    """A cgroup file's text; \"\" when it is gone (a removed cgroup reads as empty).

    Only a file that is not there (ENOENT, or ENODEV: its cgroup was removed
    while open) reads as \"\"; any other failure (EACCES, EIO) is raised, so
    a read that failed is never taken for an empty cgroup.
    """
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""
    except OSError as exc:
        if exc.errno == errno.ENODEV:
            return ""
        raise


def _read_or_blank(path: str) -> str:
    """`read`, with \"\" where it fails: for what is only best effort (a kill
    round's listing, the OOM message), never for whether a cgroup is empty."""
    try:
        return read(path)
    except OSError as exc:
        log.debug("cannot read %s: %s", path, exc)
        return ""


def _keyed(text: str, key: str) -> int:
    """The value of `key N` in a flat keyed file (memory.events, memory.oom_control)."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            with contextlib.suppress(ValueError):
                return int(value)
    return 0


class RunCgroup:
    """One run's cgroup: its directories (one per v1 hierarchy, or one on v2)."""

    def __init__(self, dirs: tuple[str, ...] | list[str]) -> None:
        self.dirs = tuple(dirs)

    def _find(self, name: str) -> str | None:
        for d in self.dirs:
            path = os.path.join(d, name)
            if os.path.exists(path):
                return path
        return None

    def exists(self) -> bool:
        return any(os.path.isdir(d) for d in self.dirs)

    def add(self, pid: int) -> None:
        """Move process `pid` into every directory (before it runs the job)."""
        for d in self.dirs:
            write(os.path.join(d, "cgroup.procs"), str(pid))

    def pids(self) -> set[int]:
        """The members, as far as they can be listed (every v1 directory holds them all)."""
        found: set[int] = set()
        for d in self.dirs:
            found.update(int(p) for p in _read_or_blank(os.path.join(d, "cgroup.procs")).split())
        return found

    def empty(self) -> bool:
        """Whether no process is left; a directory that cannot be read counts as
        not empty: the run must not end, nor its GPUs be freed, on a failed read."""
        for d in self.dirs:
            try:
                events = read(os.path.join(d, "cgroup.events"))
                if events:
                    if _keyed(events, "populated"):
                        return False
                elif read(os.path.join(d, "cgroup.procs")).strip():
                    return False
            except OSError as exc:
                log.debug("cannot tell whether the cgroup %s is empty: %s", d, exc)
                return False
        return True

    def signal(self, signum: int) -> None:
        """Send `signum` to every member (SIGTERM of a graceful stop)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def kill_round(self) -> None:
        """SIGKILL every member once: `cgroup.kill`, or freeze, kill, thaw (v1)."""
        kill = self._find("cgroup.kill")
        if kill is not None:
            with contextlib.suppress(OSError):
                write(kill, "1")
                return
        freezer = self._find("freezer.state")
        if freezer is not None:
            with contextlib.suppress(OSError):
                write(freezer, "FROZEN")
            # Frozen within a few ms; a task in uninterruptible sleep may keep it
            # FREEZING, and the kill goes on regardless (the next round catches any fork).
            deadline = time.monotonic() + 0.5
            while _read_or_blank(freezer).strip() == "FREEZING" and time.monotonic() < deadline:
                time.sleep(0.005)
        self.signal(signal.SIGKILL)
        if freezer is not None:
            with contextlib.suppress(OSError):
                write(freezer, "THAWED")

    def kill_sync(self, timeout: float) -> bool:
        """Kill rounds until the cgroup is empty or `timeout` passes; whether it emptied."""
        deadline = time.monotonic() + timeout
        while not self.empty():
            if time.monotonic() > deadline:
                return False
            self.kill_round()
            time.sleep(0.01)
        return True

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer ended in this cgroup (memory.events on v2,
        memory.oom_control on v1)."""
        events = self._find("memory.events")
        if events is not None:
            return _keyed(_read_or_blank(events), "oom_kill")
        control = self._find("memory.oom_control")
        return _keyed(_read_or_blank(control), "oom_kill") if control is not None else 0

    def memory_limit(self) -> int:
        """The memory limit in bytes (0: none)."""
        for name in ("memory.max", "memory.limit_in_bytes"):
            path = self._find(name)
            if path is not None:
                text = _read_or_blank(path).strip()
                if text.isdigit() and int(text) < 1 << 62:
                    return int(text)
        return 0

    def oom_message(self) -> str:
        """ "out of memory: limit 8 GB" when the OOM killer acted here, else ""."""
        if not self.oom_kills():
            return ""
        limit = self.memory_limit()
        # The words are protocol.OOM_MESSAGE_PREFIX's (this module imports only the
        # standard library: the lease guard runs it).
        return f"out of memory: limit {round(limit / GIB, 2):g} GB" if limit else "out of memory"

    def remove(self) -> None:
        """Remove the (empty) directories; ones already gone are fine."""
        for d in self.dirs:
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(d)

    def finish(self) -> str:
        """Remove the emptied cgroup, and say whether the OOM killer ended the run."""
        oom = self.oom_message()
        try:
            self.remove()
        except OSError as exc:
            log.warning("could not remove the cgroup %s: %s", self.dirs[0], exc)
        return oom

    def empty_and_remove(self, timeout: float) -> str:
        """Kill everything in it (blocking, up to `timeout`), remove it; `finish`'s message."""
        self.kill_sync(timeout)
        return self.finish()


class CgroupBackend(Protocol):
    version: str
    # The limits it enforces, of "cpu", "memory", "pids", "devices".
    enforced: frozenset[str]

    def create(self, name: str, limits: Limits) -> RunCgroup: ...

    def runs(self) -> list[RunCgroup]:
        """Every run cgroup under this agent's base (to sweep those no record names)."""
        ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


def _describe(version: str, enforced: frozenset[str], where: str) -> str:
    order = ("cpu", "memory", "pids", "devices")
    missing = [k for k in order if k not in enforced]
    text = f"cgroup {version} at {where}, limits: {', '.join(k for k in order if k in enforced)}"
    if missing:
        text += f"; not enforced: {', '.join(missing)}"
    return text


class V1Cgroups:
    """cgroup v1: one directory per hierarchy, `bases[controller]/<name>`."""

    version = "v1"

    def __init__(self, bases: dict[str, str]) -> None:
        self.bases = bases
        self.enforced = frozenset(
            {"cpu": "cpu", "memory": "memory", "pids": "pids", "devices": "devices"}[c]
            for c in bases
            if c != "freezer"
        )

    def create(self, name: str, limits: Limits) -> RunCgroup:
        dirs = []
        try:
            for controller, base in self.bases.items():
                path = os.path.join(base, name)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path)
                dirs.append(path)
                self._limit(controller, path, limits)
        except OSError as exc:
            RunCgroup(dirs).remove()
            raise CgroupError(f"could not make the run's cgroup {name}: {exc}") from exc
        return RunCgroup(dirs)

    @staticmethod
    def _limit(controller: str, path: str, limits: Limits) -> None:
        def put(name: str, value: object) -> None:
            write(os.path.join(path, name), str(value))

        if controller == "cpu" and limits.cpus > 0:
            put("cpu.cfs_period_us", CFS_PERIOD_US)
            put("cpu.cfs_quota_us", max(1000, int(limits.cpus * CFS_PERIOD_US)))
        elif controller == "memory" and limits.memory_bytes > 0:
            put("memory.limit_in_bytes", limits.memory_bytes)
            # With swap accounting, swap counts too: a job cannot page out past its limit.
            if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                put("memory.memsw.limit_in_bytes", limits.memory_bytes)
        elif controller == "pids" and limits.pids > 0:
            put("pids.max", limits.pids)
        elif controller == "devices":
            for major, minor in limits.denied_devices:
                put("devices.deny", f"c {major}:{minor} rwm")

    def runs(self) -> list[RunCgroup]:
        names = {n for base in self.bases.values() for n in _children(base)}
        return [RunCgroup([os.path.join(b, n) for b in self.bases.values()]) for n in names]

    def describe(self) -> str:
        where = self.bases.get("freezer") or next(iter(self.bases.values()))
        return _describe(self.version, self.enforced, os.path.dirname(where) + "/...")

    def close(self) -> None:
        for base in self.bases.values():
            _remove_base(base)


class V2Cgroups:
    """cgroup v2: one directory, `base/<name>`, with the controllers `base` hands down."""

    version = "v2"

    def __init__(self, base: str, controllers: frozenset[str], devices: bool = False) -> None:
        """`devices`: whether device rules can be attached here (`agent.devicefilter`)."""
        self.base = base
        self.controllers = controllers
        self.enforced = frozenset(controllers & set(V2_CONTROLLERS)) | (
            {"devices"} if devices else set()
        )

    def create(self, name: str, limits: Limits) -> RunCgroup:
        path = os.path.join(self.base, name)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(path)
            if "cpu" in self.controllers and limits.cpus > 0:
                quota = max(1000, int(limits.cpus * CFS_PERIOD_US))
                write(os.path.join(path, "cpu.max"), f"{quota} {CFS_PERIOD_US}")
            if "memory" in self.controllers and limits.memory_bytes > 0:
                write(os.path.join(path, "memory.max"), str(limits.memory_bytes))
                swap = os.path.join(path, "memory.swap.max")
                if os.path.exists(swap):
                    write(swap, "0")
            if "pids" in self.controllers and limits.pids > 0:
                write(os.path.join(path, "pids.max"), str(limits.pids))
            if "devices" in self.enforced and limits.denied_devices:
                devicefilter.deny(path, limits.denied_devices)
        except OSError as exc:
            RunCgroup([path]).remove()
            raise CgroupError(f"could not make the run's cgroup {path}: {exc}") from exc
        return RunCgroup([path])

    def runs(self) -> list[RunCgroup]:
        return [RunCgroup([os.path.join(self.base, n)]) for n in _children(self.base)]

    def describe(self) -> str:
        text = _describe(self.version, self.enforced, self.base)
        if "devices" in self.enforced:
            return text
        return text.replace("devices", "devices (the kernel refused a BPF device program)", 1)

    def close(self) -> None:
        _remove_base(self.base)


def _children(base: str) -> list[str]:
    try:
        return [e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _remove_base(base: str) -> None:
    # The base, then `schedulearn` above it once no other agent's base is left there.
    for path in (base, os.path.dirname(base)):
        try:
            os.rmdir(path)
        except OSError:
            return
