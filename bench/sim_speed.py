"""How fast the simulator replays a large trace: wall time and simulated jobs/s per policy.

Default: the whole Philly trace (82,247 jobs) on a 2,048-GPU cluster
(256 servers x 8 GPUs), policies fifo and tiresias, pinned to one CPU
core. Prints the machine it ran on. Goals (issue 2): fifo <= 5 s,
tiresias <= 30 s. Nothing is asserted; run it by hand:

    uv run python bench/sim_speed.py
    uv run python bench/sim_speed.py --policy fifo,srtf --limit 20000 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import sys
import time
from pathlib import Path

from schedulearn.core import create
from schedulearn.sim import parse_cluster
from schedulearn.sim.engine import Simulator
from schedulearn.sim.workloads.traces import load_trace

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO / "traces" / "philly" / "philly-jobs.csv"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="trace CSV")
    parser.add_argument("--cluster", default="256x8", help="cluster shape [256x8]")
    parser.add_argument("--policy", default="fifo,tiresias", help="comma-separated policies")
    parser.add_argument("--limit", type=int, default=0, help="only the first N jobs")
    parser.add_argument("--profile", action="store_true", help="print the cProfile top 25")
    parser.add_argument("--all-cores", action="store_true", help="do not pin to one core")
    args = parser.parse_args()

    if not args.trace.is_file():
        print(f"trace {args.trace} not found; give --trace PATH", file=sys.stderr)
        return 2
    pinned = "no"
    if not args.all_cores and hasattr(os, "sched_setaffinity"):
        core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
        pinned = f"yes (core {core})"
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, pinned to one core: {pinned}")
    print(f"python {platform.python_version()} on {platform.system()} {platform.release()}")

    t0 = time.perf_counter()
    workload = load_trace(args.trace)
    if args.limit:
        from schedulearn.sim.jobs import Workload

        workload = Workload(workload.name, workload.jobs[: args.limit])
    load_s = time.perf_counter() - t0
    cluster = parse_cluster(args.cluster)
    print(
        f"trace: {args.trace.name}, {len(workload):,} jobs (loaded in {load_s:.2f} s); "
        f"cluster {args.cluster}: {cluster.total_gpus:,} GPUs"
    )
    print(
        f"{'policy':<12} {'wall s':>8} {'cpu s':>8} {'jobs/s':>10} {'passes':>9} "
        f"{'mean JCT s':>11} {'p99 JCT s':>11} {'wait s':>8} {'preempt':>8}"
    )
    for spec in args.policy.split(","):
        sim = Simulator(workload, cluster, create(spec), policy_name=spec)
        prof = cProfile.Profile() if args.profile else None
        started, cpu_started = time.perf_counter(), time.process_time()
        result = prof.runcall(sim.run) if prof is not None else sim.run()
        # CPU time too: on a shared machine other processes inflate the wall time.
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        s = result.summary
        print(
            f"{spec:<12} {wall:>8.2f} {cpu:>8.2f} {len(workload) / wall:>10,.0f} "
            f"{result.passes:>9,} "
            f"{s.mean_jct:>11,.0f} {s.p99_jct:>11,.0f} {s.mean_queueing_delay:>8,.0f} "
            f"{s.preemptions:>8,}"
        )
        if prof is not None:
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
