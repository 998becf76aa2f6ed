"""Similarity against type-agnostic FIFO on Gavel's 3-type cluster: orders, seeds, arrivals.

Prints, for every (arrivals, cluster order, seed), FIFO's and
similarity's makespan and mean JCT and their ratios, then per
(arrivals, order) the mean and range of the ratios over the seeds.
"Bound" is a lower bound on any policy's makespan: the latest of the
jobs' arrival plus run time on its fastest type (Gavel's
spread-over-servers figures when its type's servers are too small),
as `GavelSpeed` runs it.

    uv run python bench/similarity_vs_fifo.py [--seeds 0-4] [--n 300]

Cluster orders: FIFO places on the tightest server in cluster order,
blind to types, so with one-GPU servers it takes the first free one in
the order written; we give it K80s first, V100s first, and the three
types interleaved in blocks of 12.
"""

from __future__ import annotations

import argparse
import statistics
import time

from schedulearn.core.views import Placement
from schedulearn.sim.cluster import parse_cluster
from schedulearn.sim.gavel import GavelSpeed
from schedulearn.sim.runner import run_all
from schedulearn.sim.speed import ClusterShape
from schedulearn.sim.workloads.spec import parse_workload


def orders(per_server: int) -> dict[str, str]:
    """The three cluster orders, 36 GPUs of each type on `per_server`-GPU servers."""
    n, block = 36 // per_server, 12 // per_server
    g = per_server
    return {
        "K80 first": f"{n}x{g}:k80+{n}x{g}:p100+{n}x{g}:v100",
        "V100 first": f"{n}x{g}:v100+{n}x{g}:p100+{n}x{g}:k80",
        "interleaved": "+".join([f"{block}x{g}:k80+{block}x{g}:p100+{block}x{g}:v100"] * 3),
    }


ARRIVALS = {"static": "arrivals=static", "poisson": "rate=2"}


def seeds(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def bound(spec: str, seed: int, cluster: str) -> float:
    """Latest arrival + time on its best type over the jobs: no makespan is shorter."""
    (workload,) = parse_workload(spec, seed=seed)
    nodes = parse_cluster(cluster).nodes
    shape = ClusterShape.of(nodes)
    speed = GavelSpeed()
    latest = 0.0
    for job in workload.jobs:
        rates = []
        for kind in sorted({n.gpu_type for n in nodes}):
            # The job on the fewest servers of that type.
            parts: dict[str, list[int]] = {}
            need = job.gpus
            for n in (n for n in nodes if n.gpu_type == kind):
                if need <= 0:
                    break
                take = min(need, n.num_gpus)
                parts[n.name] = list(range(take))
                need -= take
            rates.append(speed.rate(job, Placement.of(parts), shape))
        latest = max(latest, job.submitted_at + (job.duration or 0.0) / max(rates))
    return latest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument(
        "--per-server",
        type=int,
        default=1,
        choices=(1, 2, 4, 12),
        help="GPUs per server (1: Gavel's cluster; 4: multi-GPU jobs can stay on one server)",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    ratios: dict[tuple[str, str], list[tuple[float, float]]] = {}
    print(
        "arrivals order       seed  fifo mksp  sim mksp  bound   ratio | fifo JCT  sim JCT  ratio"
    )
    for arrivals, option in ARRIVALS.items():
        spec = f"gavel:n={args.n}:{option}"
        for order, cluster in orders(args.per_server).items():
            for seed in seeds(args.seeds):
                workloads = parse_workload(spec, seed=seed)
                fifo, sim = (r.summary for r in run_all(workloads, ["fifo", "similarity"], cluster))
                assert fifo.unfinished == sim.unfinished == 0
                mk, jct = sim.makespan / fifo.makespan, sim.mean_jct / fifo.mean_jct
                ratios.setdefault((arrivals, order), []).append((mk, jct))
                print(
                    f"{arrivals:8} {order:12} {seed:4} {fifo.makespan / 86400:8.1f}d "
                    f"{sim.makespan / 86400:7.1f}d {bound(spec, seed, cluster) / 86400:5.1f}d "
                    f"{mk:6.2f} | {fifo.mean_jct / 3600:7.1f}h {sim.mean_jct / 3600:7.1f}h "
                    f"{jct:5.2f}"
                )
    print("\nsimilarity / fifo over the seeds: mean (min-max)")
    print("arrivals order        makespan              mean JCT")
    for (arrivals, order), pairs in ratios.items():
        mks, jcts = [p[0] for p in pairs], [p[1] for p in pairs]
        print(
            f"{arrivals:8} {order:12} {statistics.mean(mks):.2f} ({min(mks):.2f}-{max(mks):.2f})"
            f"      {statistics.mean(jcts):.2f} ({min(jcts):.2f}-{max(jcts):.2f})"
        )
    print(f"\nwall {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
