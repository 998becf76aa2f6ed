"""Finding the cgroups a host mounts, and making the agent's backend on them.

`detect(mode, scope)` reads `/proc/self/mountinfo` (which hierarchies are
mounted, and where) and `/proc/self/cgroup` (the agent's own cgroup in
each), and returns the backend (`agent.cgroups`) whose base is
`<agent's own cgroup>/schedulearn/<scope>`: cgroup v2 when the unified
hierarchy is the main one (or the only one, or `mode` says v2), else the
v1 controllers. It raises `CgroupError`, saying what to change, when the
agent cannot make cgroups there. On v2 it enables the controllers the
runs need down to the base; when the agent's own cgroup holds processes
(a systemd service), they move to a leaf `agent` first (the
no-internal-process rule).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
from dataclasses import dataclass

from schedulearn.agent import devicefilter
from schedulearn.agent.accounts import JobsAs
from schedulearn.agent.cgroups import (
    V1_CONTROLLERS,
    V2_CONTROLLERS,
    CgroupBackend,
    CgroupError,
    Mode,
    V1Cgroups,
    V2Cgroups,
    read,
    write,
)
from schedulearn.agent.config import AgentConfig

log = logging.getLogger(__name__)


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
        mountinfo = read("/proc/self/mountinfo")
    found = mounts(mountinfo)
    own = own_cgroups(read("/proc/self/cgroup"))
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
    offered = frozenset(read(os.path.join(top, "cgroup.controllers")).split())
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
            for pid in read(os.path.join(top, "cgroup.procs")).split():
                with contextlib.suppress(OSError):
                    write(os.path.join(leaf, "cgroup.procs"), pid)
            _enable(parent, wanted)
    handed = frozenset(read(os.path.join(base, "cgroup.controllers")).split())
    return V2Cgroups(base, handed, devices=not devicefilter.works(base))


def _enable(parent: str, controllers: list[str]) -> None:
    write(os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in controllers))


def for_agent(config: AgentConfig) -> CgroupBackend | None:
    """Where this agent's runs get their cgroups (None: `--no-cgroups`, or an agent
    running jobs as itself that may make none); `CgroupError` when an agent running
    jobs as their owners, or told a version, cannot have them."""
    if config.cgroups == "off":
        return None
    # Runs of two agents on one host (tests, several state directories) never share a name.
    scope = f"{config.name}.{hashlib.sha1(str(config.state_dir).encode()).hexdigest()[:8]}"
    try:
        return detect(config.cgroups, scope)
    except CgroupError as exc:
        if config.jobs_as is JobsAs.OWNER:
            raise CgroupError(
                f"{exc}. Jobs run as their owners must be contained: each run is its "
                "cgroup (docs/security.md); pass --no-cgroups only on a host you trust them on"
            ) from exc
        if config.cgroups != "auto":
            raise
        log.warning("no cgroups for jobs (%s): runs are process groups, uncontained", exc)
        return None
