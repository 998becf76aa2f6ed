"""How fast the simulator is: one small simulation as a whole command, and the
whole Philly trace replayed on a contended cluster.

Prints the machine it ran on (bench/machine.py: CPUs, Python build, load,
single-core speed probe), then two parts (issue 36; nothing is asserted,
run it by hand):

1. **The command** (item 4, goal <= 0.3 s): `schedulearn simulate
   --workload traces/pollux/workloads/workload-6.csv --cluster 16x4
   --policy tiresias:mode=artifact --round 60 --artifact-time`, each run a
   fresh process as a user types it (the console script; Python's bytecode
   cache on, as after any first run, in a temporary PYTHONPYCACHEPREFIX):
   the median wall and CPU seconds of `--runs` runs, `python -c pass`
   beside it, and the replay alone (`Simulator.run`, in this process, the
   median of as many runs): what is not replay is start-up and loading.
2. **The trace** (item 3): the whole Philly trace (82,247 jobs) on
   `--cluster` (64x8: 512 GPUs, contended) under each of `--policy`
   (tiresias; goal <= 60 s), then the same under the fair-share layer
   with the trace's 15 virtual clusters as queues guaranteed GPUs in
   proportion to their GPU-hours, rounded down (as bench/fairness.py and
   `simulate --tenants philly`; goal <= 90 s; `--no-queues` leaves it
   out). The process is pinned to one core, and CPU time is printed
   beside wall time; the goal is judged on both (on a shared machine
   other processes inflate the wall time, not the CPU time).

    uv run python bench/sim_speed.py                      # both parts, with and without queues
    uv run python bench/sim_speed.py --part trace --no-queues
    uv run python bench/sim_speed.py --part trace --cluster 256x8 --policy fifo,tiresias
    uv run python bench/sim_speed.py --part trace --limit 20000 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe, speed_line

from schedulearn.core import create
from schedulearn.core.fairshare import FairShare
from schedulearn.core.policy import Policy
from schedulearn.sim import parse_cluster
from schedulearn.sim.engine import Simulator
from schedulearn.sim.jobs import Workload
from schedulearn.sim.runner import SpeedOptions, adapt
from schedulearn.sim.tenants import proportional
from schedulearn.sim.workloads.spec import parse_workload
from schedulearn.sim.workloads.traces import load_trace

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO / "traces" / "philly" / "philly-jobs.csv"
WORKLOAD_6 = REPO / "traces" / "pollux" / "workloads" / "workload-6.csv"
COMMAND = [
    "simulate",
    "--workload",
    str(WORKLOAD_6.relative_to(REPO)),
    "--cluster",
    "16x4",
    "--policy",
    "tiresias:mode=artifact",
    "--round",
    "60",
    "--artifact-time",
]
COMMAND_GOAL = 0.3
PLAIN_GOAL = 60.0
QUEUES_GOAL = 90.0
MIN_RUN = 300.0  # seconds before reclaim: bench/fairness.py's and simulate's default


def _script() -> list[str]:
    """The installed console script, as a user runs it (else the same entry point)."""
    found = shutil.which("schedulearn", path=str(Path(sys.executable).parent))
    if found:
        return [found]
    return [sys.executable, "-c", "from schedulearn.cli.entry import main; main()"]


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU seconds) of one run of `argv`, a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _medians(argv: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    times = [_timed(argv, env) for _ in range(runs)]
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)


def _replay_seconds(runs: int) -> float:
    """The median time of the command's replay alone (`Simulator.run`), as the CLI builds it."""
    (workload,) = parse_workload(str(WORKLOAD_6), 0)
    model = SpeedOptions(artifact_time=True).build([workload])
    workload = adapt(workload, model)
    times = []
    for _ in range(runs):
        sim = Simulator(
            workload, parse_cluster("16x4"), create("tiresias:mode=artifact"), model,
            round_seconds=60.0,
        )  # fmt: skip
        times.append(sim.run().wall_seconds)
    return statistics.median(times)


def command_part(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("SCHEDULEARN_")
            and k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
        }
        env |= {"PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache"), "COLUMNS": "200"}
        argv = [*_script(), *COMMAND]
        _timed(argv, env)  # the first run writes the bytecode cache, as a user's first
        bare, bare_cpu = _medians([sys.executable, "-c", "pass"], env, runs)
        wall, cpu = _medians(argv, env, runs)
    replay = _replay_seconds(runs)
    print(f"\n== the command (issue 36 item 4; median of {runs} runs, bytecode cache on)")
    print(f"schedulearn {' '.join(COMMAND)}")
    print(f"{'':<28} {'wall s':>8} {'cpu s':>8}")
    print(f"{'python -c pass':<28} {bare:>8.3f} {bare_cpu:>8.3f}")
    verdict = "met" if wall <= COMMAND_GOAL else "NOT met"
    print(f"{'the command':<28} {wall:>8.3f} {cpu:>8.3f}  goal <= {COMMAND_GOAL} s: {verdict}")
    print(f"{'of which the replay':<28} {replay:>8.3f}")


def _pin() -> str:
    if not hasattr(os, "sched_setaffinity"):
        return "no"
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return f"yes (core {core})"


def trace_part(args: argparse.Namespace) -> int:
    if not args.trace.is_file():
        print(f"trace {args.trace} not found; give --trace PATH", file=sys.stderr)
        return 2
    pinned = "no" if args.all_cores else _pin()
    t0 = time.perf_counter()
    workload = load_trace(args.trace)
    if args.limit:
        workload = Workload(workload.name, workload.jobs[: args.limit])
    load_s = time.perf_counter() - t0
    cluster = parse_cluster(args.cluster)
    print(
        f"\n== the trace (issue 36 item 3): {args.trace.name}, {len(workload):,} jobs "
        f"(loaded in {load_s:.2f} s, not counted); cluster {args.cluster}: "
        f"{cluster.total_gpus:,} GPUs; pinned to one core: {pinned}"
    )
    print(
        f"{'policy':<18} {'wall s':>8} {'cpu s':>8} {'jobs/s':>8} {'passes':>9} "
        f"{'mean JCT s':>11} {'p99 JCT s':>11} {'wait s':>9} {'preempt':>8}  goal"
    )
    runs: list[tuple[str, bool]] = [(spec, False) for spec in args.policy.split(",")]
    runs += [(spec, True) for spec in args.policy.split(",")] if not args.no_queues else []
    tenancy = proportional(workload, cluster.total_gpus) if not args.no_queues else None
    for spec, queues in runs:
        policy: Policy = create(spec)
        label = spec
        if queues:
            policy, label = FairShare(policy, min_run=MIN_RUN), f"{spec}+queues"
        sim = Simulator(
            workload, cluster, policy, record_segments=False, policy_name=label,
            tenancy=tenancy if queues else None,
        )  # fmt: skip
        prof = cProfile.Profile() if args.profile else None
        started, cpu_started = time.perf_counter(), time.process_time()
        result = prof.runcall(sim.run) if prof is not None else sim.run()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        s = result.summary
        goal = QUEUES_GOAL if queues else PLAIN_GOAL
        verdict = (
            f"<= {goal:.0f} s: cpu {'met' if cpu <= goal else 'NOT met'}, "
            f"wall {'met' if wall <= goal else 'NOT met'}"
        )
        if args.limit or args.cluster != "64x8":
            verdict = "-"  # the goals are for the whole trace on 64x8
        print(
            f"{label:<18} {wall:>8.2f} {cpu:>8.2f} {len(workload) / wall:>8,.0f} "
            f"{result.passes:>9,} {s.mean_jct:>11,.0f} {s.p99_jct:>11,.0f} "
            f"{s.mean_queueing_delay:>9,.0f} {s.preemptions:>8,}  {verdict}",
            flush=True,
        )
        if prof is not None:
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("both", "command", "trace"), default="both")
    parser.add_argument("--runs", type=int, default=9, help="runs of the command (median)")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="trace CSV")
    parser.add_argument("--cluster", default="64x8", help="cluster shape [64x8]")
    parser.add_argument("--policy", default="tiresias", help="comma-separated policies")
    parser.add_argument(
        "--no-queues", action="store_true", help="leave out each policy with queues"
    )
    parser.add_argument("--queues", action="store_true", help=argparse.SUPPRESS)  # the default
    parser.add_argument("--limit", type=int, default=0, help="only the first N jobs")
    parser.add_argument("--profile", action="store_true", help="print the cProfile top 25")
    parser.add_argument("--all-cores", action="store_true", help="do not pin to one core")
    args = parser.parse_args()
    print(describe())
    print(speed_line())
    if args.part in ("both", "command"):
        command_part(args.runs)
    if args.part in ("both", "trace"):
        return trace_part(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
