"""A run is exactly its cgroup (issue 33): the subprocess executor on real cgroups.

Real processes in real cgroups of this host, through the executor as the
agent drives it: on cgroup v1 (the controllers this machine kind mounts)
and, where a cgroup2 hierarchy is mounted, on v2 too (here: the empty
`unified` hierarchy, which offers no controllers, so membership, freeze
and `cgroup.kill` are exercised there and the limits on v1 only).

Each test shows first that what it guards against can happen (a child
leaves the job's session; the fake GPU node of the run's own GPU opens as
far as the driver-less kernel lets it), then that the cgroup holds.
GPU device nodes are made with `mknod` (NVIDIA's major 195), as no GPU is
here, and reach the executor through `VirtualGpus.device_paths`, the
interface real GPUs' nodes come through.

Needs root (cgroups, mknod).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dependencies import need_root
from schedulearn.agent import cgroupmounts, cgroups
from schedulearn.agent.cgroups import CgroupBackend, CgroupError, RunCgroup
from schedulearn.agent.executors.base import OutputLine, StartError
from schedulearn.agent.executors.process import ProcessHandle, SubprocessExecutor
from schedulearn.agent.gpus import VirtualGpus, device_numbers
from schedulearn.agent.leaseguard import Run, _Log, stop
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.protocol import Assignment, Executor
from waiting import wait_until

NVIDIA_MAJOR = 195


@pytest.fixture(autouse=True)
def _as_root() -> None:
    need_root("makes cgroups and device nodes")


def _backend(version: str, tmp_path: Path) -> CgroupBackend:
    try:
        # The worker's pid apart: xdist workers give their tests the same tmp names.
        name = f"test.{os.getpid()}.{tmp_path.name[-20:]}"
        return cgroupmounts.detect("v1" if version == "v1" else "v2", name)
    except CgroupError as exc:
        if version == "v2":
            pytest.skip(f"no cgroup2 hierarchy here: {exc}")
        raise


def _clear(b: CgroupBackend) -> None:
    """Whatever a failed test left in the backend's cgroups is killed and removed."""
    for left in b.runs():
        left.empty_and_remove(10)
    b.close()


@pytest.fixture(params=["v1", "v2"])
def cgroup_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CgroupBackend]:
    b = _backend(request.param, tmp_path)
    try:
        yield b
    finally:
        _clear(b)


@pytest.fixture
def v1(tmp_path: Path) -> Iterator[CgroupBackend]:
    b = _backend("v1", tmp_path)
    try:
        yield b
    finally:
        _clear(b)


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(tmp_path / "state")


def new_record(store: StateStore, job_id: int) -> JobRecord:
    record = JobRecord(
        job_id=job_id,
        attempt=1,
        executor=Executor.SUBPROCESS,
        job_dir=str(store.create_job_dir(job_id, 1)),
        checkpoint_dir=str(store.default_checkpoint_dir(job_id)),
        started_at=time.time(),
    )
    store.save(record)
    return record


def job(job_id: int, command: str, **kw: object) -> Assignment:
    return Assignment.model_validate({"job_id": job_id, "attempt": 1, "command": command, **kw})


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def first_line(path: Path) -> int:
    wait_until(lambda: path.exists() and path.read_text().strip(), 10, f"{path} written")
    return int(path.read_text().split()[0])


# A child in a session of its own that ignores SIGTERM (so does its `sleep`): only
# a SIGKILL of everything in the cgroup ends it.
ESCAPE = (
    "setsid sh -c 'trap \"\" TERM; echo $$ > {pidfile}; while true; do sleep 0.05; done' & "
    "sleep 1000"
)


def test_a_job_is_in_its_cgroup_before_it_runs_and_a_setsid_child_ends_with_the_cancel(
    cgroup_backend: CgroupBackend, store: StateStore, tmp_path: Path
) -> None:
    pidfile = tmp_path / "escaped.pid"
    record = new_record(store, 1)

    async def go() -> None:
        ex = SubprocessExecutor("node-a", cgroups=cgroup_backend)
        # The job's very first command reads its own cgroup: it is the run's already.
        command = "cat /proc/self/cgroup; " + ESCAPE.format(pidfile=pidfile)
        handle = await ex.start(job(1, command), record)
        lines: list[OutputLine] = []
        pump = asyncio.create_task(handle.pump_logs(lines.append))
        escaped = first_line(pidfile)
        # It left the job's session and process group: a group kill would miss it.
        assert os.getsid(escaped) != record.pid
        assert os.getpgid(escaped) != record.pid
        cgroup = RunCgroup(record.cgroup)
        assert escaped in cgroup.pids()
        await asyncio.wait_for(handle.stop(grace_seconds=0.5), 30)
        await pump
        # Ended means empty: nothing of the run is left, and its cgroup is gone.
        assert not alive(escaped)
        assert not cgroup.exists()
        name = f"/{record.job_id}.{record.attempt}"
        own = [ln.text for ln in lines if ln.text.split(":")[-1].endswith(name)]
        assert own, [ln.text for ln in lines]
        await ex.close()

    asyncio.run(go())


def test_a_child_left_behind_by_a_job_that_ended_is_killed_before_the_run_ends(
    cgroup_backend: CgroupBackend, store: StateStore, tmp_path: Path
) -> None:
    pidfile = tmp_path / "escaped.pid"
    record = new_record(store, 2)

    async def go() -> None:
        ex = SubprocessExecutor("node-a", cgroups=cgroup_backend)
        command = f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 1000' & sleep 0.3; exit 4"
        handle = await ex.start(job(2, command), record)
        status = await asyncio.wait_for(handle.wait(), 30)
        assert status.exit_code == 4
        escaped = int(pidfile.read_text())
        assert not alive(escaped)
        assert not RunCgroup(record.cgroup).exists()

    asyncio.run(go())


def test_a_restarted_agent_that_adopts_a_run_stops_its_whole_cgroup(
    cgroup_backend: CgroupBackend, store: StateStore, tmp_path: Path
) -> None:
    pidfile = tmp_path / "escaped.pid"
    record = new_record(store, 3)

    async def start() -> None:
        ex = SubprocessExecutor("node-a", cgroups=cgroup_backend)
        await ex.start(job(3, ESCAPE.format(pidfile=pidfile)), record)
        store.save(record)

    asyncio.run(start())  # the first agent process's loop is gone; the run is not
    escaped = first_line(pidfile)

    async def adopt() -> None:
        (handle,) = await SubprocessExecutor("node-a", cgroups=cgroup_backend).recover(
            store.load_all()
        )
        assert isinstance(handle, ProcessHandle) and handle.cgroup is not None
        await asyncio.wait_for(handle.stop(grace_seconds=0.2), 30)
        assert not alive(escaped)
        assert not handle.cgroup.exists()

    try:
        asyncio.run(adopt())
    finally:
        RunCgroup(record.cgroup).kill_sync(5)
        RunCgroup(record.cgroup).remove()


def test_the_lease_guard_kills_the_whole_cgroup_of_a_run(
    cgroup_backend: CgroupBackend, store: StateStore, tmp_path: Path
) -> None:
    pidfile = tmp_path / "escaped.pid"
    record = new_record(store, 4)

    async def start() -> None:
        await SubprocessExecutor("node-a", cgroups=cgroup_backend).start(
            job(4, ESCAPE.format(pidfile=pidfile)), record
        )

    asyncio.run(start())
    escaped = first_line(pidfile)
    run = Run(4, 1, record.job_dir, record.pid, None, tuple(record.cgroup))
    try:
        stop([run], grace=0.3, log=_Log(tmp_path / "guard.log"))
        assert not alive(escaped)
        assert not RunCgroup(record.cgroup).exists()
    finally:
        RunCgroup(record.cgroup).kill_sync(5)
        RunCgroup(record.cgroup).remove()


def test_a_job_over_its_memory_limit_ends_with_the_out_of_memory_reason(
    v1: CgroupBackend, store: StateStore
) -> None:
    record = new_record(store, 5)
    hog = "python3 -c 'b = bytearray(512 << 20); print(len(b))'"

    async def go() -> None:
        ex = SubprocessExecutor("node-a", cgroups=v1)
        handle = await ex.start(job(5, hog, memory_gb=0.25), record)
        status = await asyncio.wait_for(handle.wait(), 30)
        assert status.exit_code == 137
        assert status.message == "out of memory: limit 0.25 GB"
        # The same allocation under a limit that fits it is no OOM.
        fits = new_record(store, 6)
        handle = await ex.start(job(6, hog, memory_gb=1), fits)
        status = await asyncio.wait_for(handle.wait(), 30)
        assert (status.exit_code, status.message) == (0, "")

    asyncio.run(go())


def test_a_fork_bomb_is_held_to_the_pids_limit_and_ends_with_its_job(
    v1: CgroupBackend, store: StateStore
) -> None:
    record = new_record(store, 7)
    # `exec`: the job's shell needs no fork of its own once the bomb is going.
    bomb = "b() { b | b & }; b; exec sleep 1000"

    async def go() -> None:
        handle = await SubprocessExecutor("node-a", cgroups=v1, pids_max=40).start(
            job(7, bomb), record
        )
        cgroup = RunCgroup(record.cgroup)
        pids = next(d for d in cgroup.dirs if "/pids/" in d)
        assert Path(pids, "pids.max").read_text().strip() == "40"
        # Forks are refused at the limit, and the count never passes it.
        wait_until(
            lambda: int(Path(pids, "pids.events").read_text().split()[-1]), 30, "a refused fork"
        )
        assert int(Path(pids, "pids.current").read_text()) <= 40
        await asyncio.wait_for(handle.stop(grace_seconds=0.2), 30)
        assert not cgroup.exists()

    asyncio.run(go())


def test_a_busy_job_is_throttled_to_its_cpus(v1: CgroupBackend, store: StateStore) -> None:
    record = new_record(store, 10)

    async def go() -> None:
        handle = await SubprocessExecutor("node-a", cgroups=v1).start(
            job(10, "while :; do :; done", cpus=0.1), record
        )
        cpu = next(d for d in RunCgroup(record.cgroup).dirs if "/cpu/" in d or "/cpu," in d)
        assert Path(cpu, "cpu.cfs_quota_us").read_text().strip() == "10000"
        assert Path(cpu, "cpu.cfs_period_us").read_text().strip() == "100000"
        # The kernel holds it back once it has used its tenth of a core in a period.
        wait_until(
            lambda: Path(cpu, "cpu.stat").read_text(), 30, "the job to be throttled",
            until=lambda text: int(text.split("nr_throttled ")[1].split()[0]) > 0,
        )  # fmt: skip
        await asyncio.wait_for(handle.stop(grace_seconds=0.2), 30)

    asyncio.run(go())


@pytest.fixture
def gpu_nodes(tmp_path: Path) -> dict[int, str]:
    """Two fake GPUs' device nodes (major 195, minors 0 and 1), open to everyone,
    through the same interface as real GPUs' (`device_paths`)."""
    folder = tmp_path / "dev"
    folder.mkdir()
    for i in (0, 1):
        os.mknod(folder / f"nvidia{i}", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, i))
        os.chmod(folder / f"nvidia{i}", 0o666)
    return VirtualGpus(2, device_dir=str(folder)).device_paths()


OPEN_GPUS = """python3 -c '
import errno, os, sys
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        print(path, "opened")
    except OSError as e:
        print(path, errno.errorcode[e.errno])
' {paths}"""


def test_only_the_runs_own_gpu_device_node_can_be_opened(
    cgroup_backend: CgroupBackend, store: StateStore, gpu_nodes: dict[int, str]
) -> None:
    """v1: `devices.deny`; v2: a BPF device program (`agent.devicefilter`)."""
    assert "devices" in cgroup_backend.enforced, cgroup_backend.describe()
    numbers = device_numbers(gpu_nodes)
    assert numbers == {0: (NVIDIA_MAJOR, 0), 1: (NVIDIA_MAJOR, 1)}
    command = OPEN_GPUS.format(paths=" ".join(gpu_nodes.values()))

    async def opened(ex: SubprocessExecutor, job_id: int) -> dict[str, str]:
        lines: list[OutputLine] = []
        handle = await ex.start(job(job_id, command, gpus=[1]), new_record(store, job_id))
        pump = asyncio.create_task(handle.pump_logs(lines.append))
        assert (await handle.wait()).exit_code == 0
        await pump
        return dict(ln.text.split() for ln in lines)

    async def go() -> None:
        # Without a device rule both nodes reach the (absent) driver: ENXIO, not EPERM.
        free = await opened(SubprocessExecutor("node-a", cgroups=cgroup_backend), 8)
        assert free == {gpu_nodes[0]: "ENXIO", gpu_nodes[1]: "ENXIO"}
        ruled = SubprocessExecutor("node-a", cgroups=cgroup_backend, gpu_devices=numbers)
        assert await opened(ruled, 9) == {gpu_nodes[0]: "EPERM", gpu_nodes[1]: "ENXIO"}

    asyncio.run(go())


def test_the_v2_device_program_refuses_only_the_listed_character_devices(
    tmp_path: Path,
) -> None:
    """Its rules, one by one: block devices and other minors and majors pass."""
    b = _backend("v2", tmp_path)
    nodes = {
        "denied": (0o020000, NVIDIA_MAJOR, 1),
        "other_minor": (0o020000, NVIDIA_MAJOR, 2),
        "other_major": (0o020000, NVIDIA_MAJOR + 1, 1),
        "block": (0o060000, NVIDIA_MAJOR, 1),
    }
    for name, (kind, major, minor) in nodes.items():
        os.mknod(tmp_path / name, 0o666 | kind, os.makedev(major, minor))
    cgroup = b.create("1.1", cgroups.Limits(denied_devices=((NVIDIA_MAJOR, 1),)))
    try:
        # EPERM is the rule's refusal; the driver-less nodes give ENXIO otherwise.
        probe = "; ".join(
            f"echo {n}=$( (exec 3<{tmp_path / n}) 2>&1 | grep -q 'not permitted' "
            "&& echo denied || echo allowed)"
            for n in nodes
        )
        proc = subprocess.Popen(
            ["sh", "-c", f"read go; {probe}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        cgroup.add(proc.pid)
        out, _ = proc.communicate("go\n", timeout=30)
        said = dict(line.split("=") for line in out.split())
        assert said == {
            "denied": "denied",
            "other_minor": "allowed",
            "other_major": "allowed",
            "block": "allowed",
        }, out
    finally:
        cgroup.kill_sync(5)
        cgroup.remove()
        _clear(b)


class _RunCgroupThatWillNotGo:
    """The real backend, but each run's cgroup also names a directory that is not
    there (so moving the shim in fails after its real directories took it) and
    holds a child cgroup (so removing it fails with EBUSY)."""

    def __init__(self, real: CgroupBackend) -> None:
        self.real = real
        self.version = real.version
        self.enforced = real.enforced
        self.children: list[str] = []

    def create(self, name: str, limits: cgroups.Limits) -> RunCgroup:
        made = self.real.create(name, limits)
        child = os.path.join(made.dirs[0], "child")
        os.mkdir(child)
        self.children.append(child)
        return RunCgroup([*made.dirs, os.path.join(made.dirs[0], "gone")])

    def runs(self) -> list[RunCgroup]:
        return self.real.runs()

    def describe(self) -> str:
        return self.real.describe()

    def close(self) -> None:
        self.real.close()


def test_a_start_that_fails_reports_its_own_error_when_the_cgroup_will_not_go(
    cgroup_backend: CgroupBackend, store: StateStore
) -> None:
    """The start's error is what the agent reports, not the cgroup's EBUSY after it."""
    backend = _RunCgroupThatWillNotGo(cgroup_backend)
    record = new_record(store, 95)

    async def go() -> None:
        ex = SubprocessExecutor("node-a", cgroups=backend)
        with pytest.raises(StartError, match="could not put the job in its cgroup"):
            await ex.start(job(95, "sleep 1000"), record)
        # What did start was killed: the cgroup is empty, though it is still there.
        assert RunCgroup(record.cgroup[:-1]).empty()
        assert RunCgroup(record.cgroup[:-1]).exists()

    try:
        asyncio.run(go())
    finally:
        for child in backend.children:
            os.rmdir(child)


def test_a_restarted_agent_sweeps_run_cgroups_no_record_names(
    cgroup_backend: CgroupBackend, store: StateStore, tmp_path: Path
) -> None:
    """A cgroup of this agent's that no record names (the agent died between making
    it and saving the record) is emptied and removed; one a record names is kept."""
    pidfile = tmp_path / "stray.pid"
    stray = cgroup_backend.create("90.1", cgroups.Limits())
    proc = subprocess.Popen(
        ["sh", "-c", f"read go; setsid sh -c 'echo $$ > {pidfile}; exec sleep 1000' &"],
        stdin=subprocess.PIPE,
    )
    stray.add(proc.pid)
    proc.communicate(b"go\n", timeout=30)
    escaped = first_line(pidfile)
    assert alive(escaped)
    kept = new_record(store, 91)

    async def go() -> None:
        ex = SubprocessExecutor("node-a", cgroups=cgroup_backend)
        await ex.start(job(91, "sleep 1000"), kept)
        handles = await SubprocessExecutor("node-a", cgroups=cgroup_backend).recover([kept])
        assert not alive(escaped)
        assert not stray.exists()
        assert RunCgroup(kept.cgroup).exists()
        await asyncio.wait_for(handles[0].stop(grace_seconds=0.2), 30)

    asyncio.run(go())
