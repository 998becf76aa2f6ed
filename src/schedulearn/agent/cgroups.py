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

`detect(mode, scope)` finds what this host mounts (`/proc/self/mountinfo`,
`/proc/self/cgroup`) and makes the agent's base directory
`<own cgroup>/schedulearn/<scope>`; it raises `CgroupError`, saying what
to change, when the agent cannot make cgroups there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass
from typing import Literal, Protocol

from schedulearn.agent import devicefilter

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


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
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
            _write(os.path.join(d, "cgroup.procs"), str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            found.update(int(p) for p in _read(os.path.join(d, "cgroup.procs")).split())
        return found

    def empty(self) -> bool:
        for d in self.dirs:
            events = _read(os.path.join(d, "cgroup.events"))
            if events:
                if _keyed(events, "populated"):
                    return False
            elif _read(os.path.join(d, "cgroup.procs")).strip():
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
                _write(kill, "1")
                return
        freezer = self._find("freezer.state")
        if freezer is not None:
            with contextlib.suppress(OSError):
                _write(freezer, "FROZEN")
            # Frozen within a few ms; a task in uninterruptible sleep may keep it
            # FREEZING, and the kill goes on regardless (the next round catches any fork).
            deadline = time.monotonic() + 0.5
            while _read(freezer).strip() == "FREEZING" and time.monotonic() < deadline:
                time.sleep(0.005)
        self.signal(signal.SIGKILL)
        if freezer is not None:
            with contextlib.suppress(OSError):
                _write(freezer, "THAWED")

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
            return _keyed(_read(events), "oom_kill")
        control = self._find("memory.oom_control")
        return _keyed(_read(control), "oom_kill") if control is not None else 0

    def memory_limit(self) -> int:
        """The memory limit in bytes (0: none)."""
        for name in ("memory.max", "memory.limit_in_bytes"):
            path = self._find(name)
            if path is not None:
                text = _read(path).strip()
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
            _write(os.path.join(path, name), str(value))

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
                _write(os.path.join(path, "cpu.max"), f"{quota} {CFS_PERIOD_US}")
            if "memory" in self.controllers and limits.memory_bytes > 0:
                _write(os.path.join(path, "memory.max"), str(limits.memory_bytes))
                swap = os.path.join(path, "memory.swap.max")
                if os.path.exists(swap):
                    _write(swap, "0")
            if "pids" in self.controllers and limits.pids > 0:
                _write(os.path.join(path, "pids.max"), str(limits.pids))
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


# --- finding what the host mounts ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mount:
    fstype: str  # "cgroup" or "cgroup2"
    root: str  # the cgroup the mount shows as its top
    point: str
    options: frozenset[str]


def mounts(mountinfo: str) -> list[Mount]:
    found = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        found.append(Mount(rest[0], fields[3], fields[4], frozenset(rest[2].split(","))))
    return found


def own_cgroups(proc_cgroup: str) -> dict[str, str]:
    """The agent's cgroup per v1 controller, and under "" its v2 one."""
    own: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        for c in controllers.split(",") if controllers else [""]:
            own[c] = path
    return own


def _inside(mount: Mount, own: str) -> str:
    relative = own[len(mount.root) :] if own.startswith(mount.root) else own
    return os.path.join(mount.point, relative.lstrip("/"))


def _make_base(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise CgroupError(
            f"cannot make cgroups under {os.path.dirname(path)} ({exc.strerror}): start the "
            "agent as root (or with that cgroup delegated to its user), or pass --no-cgroups "
            "to run jobs without containment"
        ) from exc


def detect(mode: Mode, scope: str, mountinfo: str | None = None) -> CgroupBackend:
    """The backend for this host: v2 when the unified hierarchy is the main one (or
    `mode` says v2), else the v1 controllers; the base is `<own>/schedulearn/<scope>`."""
    if mountinfo is None:
        mountinfo = _read("/proc/self/mountinfo")
    found = mounts(mountinfo)
    own = own_cgroups(_read("/proc/self/cgroup"))
    unified = next((m for m in found if m.fstype == "cgroup2"), None)
    v1 = {c: m for m in found if m.fstype == "cgroup" for c in m.options if c in V1_CONTROLLERS}
    pure_v2 = unified is not None and unified.point == "/sys/fs/cgroup"
    if mode == "v2" or (mode == "auto" and (pure_v2 or (unified is not None and not v1))):
        if unified is None:
            raise CgroupError("no cgroup2 hierarchy is mounted; pass --cgroups v1 or auto")
        return _v2(unified, own.get("", "/"), scope)
    if not v1:
        raise CgroupError(
            "no cgroup hierarchy is mounted (neither cgroup2 nor the v1 controllers); mount "
            "one, or pass --no-cgroups to run jobs without containment"
        )
    if "freezer" not in v1:
        raise CgroupError("the v1 freezer controller is not mounted; mount it or use cgroup v2")
    bases = {}
    for c in V1_CONTROLLERS:
        if c in v1:
            base = os.path.join(_inside(v1[c], own.get(c, "/")), "schedulearn", scope)
            _make_base(base)
            bases[c] = base
    return V1Cgroups(bases)


def _v2(unified: Mount, own: str, scope: str) -> V2Cgroups:
    top = _inside(unified, own)
    offered = frozenset(_read(os.path.join(top, "cgroup.controllers")).split())
    wanted = [c for c in V2_CONTROLLERS if c in offered]
    mine = os.path.join(top, "schedulearn")
    base = os.path.join(mine, scope)
    _make_base(base)
    for parent in (top, mine, base):
        if not wanted:
            break
        try:
            _enable(parent, wanted)
        except OSError as exc:
            if exc.errno != errno.EBUSY or parent != top:
                raise CgroupError(f"cannot enable {wanted} in {parent}: {exc}") from exc
            # The no-internal-process rule: the agent's own cgroup holds processes
            # (the agent's); they move to a leaf beside the runs, then it can hand down.
            leaf = os.path.join(top, "agent")
            os.makedirs(leaf, exist_ok=True)
            for pid in _read(os.path.join(top, "cgroup.procs")).split():
                with contextlib.suppress(OSError):
                    _write(os.path.join(leaf, "cgroup.procs"), pid)
            _enable(parent, wanted)
    handed = frozenset(_read(os.path.join(base, "cgroup.controllers")).split())
    return V2Cgroups(base, handed, devices=not devicefilter.works(base))


def _enable(parent: str, controllers: list[str]) -> None:
    _write(os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in controllers))
