"""Fairness of the fair-share layer on the Philly trace's 15 virtual clusters.

For each policy, with and without queues (`FairShare(policy)` with the
virtual clusters as queues guaranteed GPUs in proportion to their
GPU-hours, against the plain policy), on the whole trace and 2,048 GPUs
by default: per queue the sharing-incentive ratio (mean JCT shared over
mean JCT alone on a cluster of its guaranteed size), Jain's index over
per-queue mean slowdowns, overall mean JCT, wall time of the shared
replay. Goals (issue 12): with queues every ratio <= 1.05, Jain >= 0.9,
mean JCT at most 10% above the plain policy's, replay at most 20% slower.
Nothing is asserted; run by hand (uses every core unless --processes):

    uv run python bench/fairness.py
    uv run python bench/fairness.py --policy fifo --limit 20000 --cluster 32x8
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

from schedulearn.sim import parse_cluster
from schedulearn.sim.jobs import Workload
from schedulearn.sim.tenant_runs import run_tenants
from schedulearn.sim.tenants import render, tenancy_for
from schedulearn.sim.workloads.traces import load_trace

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO / "traces" / "philly" / "philly-jobs.csv"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--cluster", default="256x8")
    parser.add_argument("--policy", default="fifo,tiresias,srtf")
    parser.add_argument("--limit", type=int, default=0, help="only the first N jobs")
    parser.add_argument("--min-run", type=float, default=300.0)
    parser.add_argument("--processes", type=int, default=None)
    args = parser.parse_args()
    if not args.trace.is_file():
        print(f"trace {args.trace} not found; give --trace PATH", file=sys.stderr)
        return 2
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"python {platform.python_version()}; load {os.getloadavg()[0]:.1f}"
    )
    workload = load_trace(args.trace)
    if args.limit:
        workload = Workload(workload.name, workload.jobs[: args.limit])
    cluster = parse_cluster(args.cluster)
    tenancy = tenancy_for("philly", workload, cluster.total_gpus)
    print(
        f"{len(workload):,} jobs, cluster {args.cluster} ({cluster.total_gpus:,} GPUs), "
        f"{len(tenancy.queues)} queues"
    )
    t0 = time.perf_counter()
    runs = run_tenants(
        workload,
        cluster,
        args.policy.split(","),
        tenancy,
        with_queues=(False, True),
        min_run=args.min_run,
        processes=args.processes,
    )
    print(f"all runs: {time.perf_counter() - t0:.1f} s wall")
    plain = {r.spec: r for r in runs if not r.queues}
    for r in runs:
        s = r.shared.summary
        print(
            f"\n== {r.spec} {'with queues' if r.queues else 'without queues'}: mean JCT "
            f"{s.mean_jct:,.0f} s, replay {r.shared.wall_seconds:.2f} s, "
            f"preemptions {s.preemptions:,}"
        )
        print(render(r.fairness))
        if r.queues:
            base = plain[r.spec]
            jct = s.mean_jct / base.shared.summary.mean_jct if base.shared.summary.mean_jct else 0
            wall = r.shared.wall_seconds / base.shared.wall_seconds
            print(
                f"goals: worst ratio {r.fairness.worst_ratio:.3f} (<= 1.05), "
                f"Jain {r.fairness.jain:.3f} (>= 0.9), mean JCT x{jct:.3f} (<= 1.10), "
                f"replay x{wall:.2f} (<= 1.20; parallel runs share cores)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
