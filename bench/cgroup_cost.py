"""What a run's cgroup costs the agent: a trivial job's start-to-end, with and without.

Runs `--runs` trivial jobs (`true`) one after another through the
subprocess executor, as the agent drives it (start, wait for the end,
which with cgroups includes emptying and removing the run's cgroup),
once with no cgroups, once on cgroup v1 and once on v2 where each is
mounted and this process may make cgroups (as root). Prints the mean
wall time per run and the agent's own CPU time per run (this process),
and the machine; asserts nothing.

    sudo uv run python bench/cgroup_cost.py [--runs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from pathlib import Path

from machine import describe, speed_line

from schedulearn.agent import cgroupmounts
from schedulearn.agent.cgroups import CgroupBackend, CgroupError
from schedulearn.agent.executors.process import SubprocessExecutor
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.protocol import Assignment, Executor


async def measure(backend: CgroupBackend | None, runs: int, state: Path) -> tuple[float, float]:
    store = StateStore(state)
    executor = SubprocessExecutor("bench", cgroups=backend, pids_max=4096)
    began, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    for i in range(1, runs + 1):
        record = JobRecord(
            job_id=i,
            attempt=1,
            executor=Executor.SUBPROCESS,
            job_dir=str(store.create_job_dir(i, 1)),
            checkpoint_dir=str(store.default_checkpoint_dir(i)),
            started_at=time.time(),
        )
        job = Assignment(job_id=i, attempt=1, command="true", cpus=1, memory_gb=1, gpus=[0])
        status = await (await executor.start(job, record)).wait()
        assert status.exit_code == 0, status
    wall = time.perf_counter() - began
    used = resource.getrusage(resource.RUSAGE_SELF)
    await executor.close()
    store.close()
    return wall / runs, (used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    print(describe())
    print(speed_line())
    for name in ("none", "v1", "v2"):
        backend: CgroupBackend | None = None
        if name != "none":
            try:
                backend = cgroupmounts.detect(
                    "v1" if name == "v1" else "v2", f"bench.{time.time_ns()}"
                )
            except CgroupError as exc:
                print(f"{name}: not measured ({exc})")
                continue
        with tempfile.TemporaryDirectory() as state:
            wall, cpu = asyncio.run(measure(backend, args.runs, Path(state)))
        limits = ", ".join(sorted(backend.enforced)) if backend else "-"
        print(
            f"{name:>4}: {wall * 1000:6.2f} ms per run (start to end), "
            f"agent CPU {cpu * 1000:5.2f} ms per run; limits set: {limits}"
        )


if __name__ == "__main__":
    main()
