"""How long one scheduling pass takes on a large cluster, per policy.

One pass is what the live scheduler does between its snapshot and its
writes: `eligibility.schedulable(view)` then `policy.decide(view)`, on
1,000 nodes x 8 GPUs with 10,000 waiting jobs (sizes 1-16 GPUs, mostly
one, as on Philly), once with half the GPUs free (held by running jobs
placed at random, so the free GPUs are scattered) and once with the
cluster full (nothing can start). The policy object is kept between
passes, as the live server keeps it; one pass warms it and is not
counted. The garbage collector is held off in a pass, as the live server
holds it (`schedulearn.collector`; `--collector-on` leaves it on). Each pass
gets a snapshot built anew the way the live server builds one
(`server.services.snapshot.build`): new node, GPU and running-job views
and a new tuple of waiting jobs, whose views are the
same objects from pass to pass (the server keeps them in its
`PendingCache`), and a clock one second on. (`--same-view` hands every
pass the one snapshot object instead, which lets caches keyed by
identity hit more than they do live.) Full means every GPU busy and no
running job preemptible. The snapshots come from
`schedulearn.sim.snapshots`, the generator of the recorded pass cases.
Goals (issue 36): fifo, tiresias, srtf, goodput and similarity
at most 50 ms with half free and 10 ms when full; defrag and round-robin
at most 100 ms. `similarity/3 types` is the same cluster with V100, P100
and K80 nodes in turn, where similarity also matches, exchanges and
upgrades. Prints the machine and its speed probe beside the figures;
nothing is asserted. Run it by hand:

    uv run python bench/pass_scale.py
    uv run python bench/pass_scale.py --policy fifo,goodput --runs 5 --profile goodput:half
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from dataclasses import replace

from machine import describe, speed_line

from schedulearn.collector import collector_held
from schedulearn.core import ClusterView, Placement, create
from schedulearn.core.eligibility import schedulable
from schedulearn.sim.snapshots import TYPES, Shape, scale_view

POLICIES = "fifo,tiresias,srtf,goodput,similarity,similarity/3 types,defrag,round-robin"
GOALS = {"defrag": (100.0, 100.0), "round-robin": (100.0, 100.0)}
DEFAULT_GOAL = (50.0, 10.0)  # ms with half free, ms when full


def one_pass(policy: object, view: ClusterView, collector: bool = False) -> int:
    """One pass, with the garbage collector held off as the live server holds
    it (`schedulearn.collector`), or left on (`collector`)."""
    decide = policy.decide  # type: ignore[attr-defined]
    if collector:
        return len(decide(schedulable(view)))
    with collector_held():
        return len(decide(schedulable(view)))


def rebuilt(view: ClusterView, now: float) -> ClusterView:
    """`view` as the live server's next pass would see it: nodes, GPUs, running
    jobs and their placements read anew (new objects), the waiting jobs' views
    kept (`PendingCache`) in a new tuple, the clock at `now`."""
    nodes = tuple(replace(n, gpus=tuple(replace(g) for g in n.gpus)) for n in view.nodes)
    running = tuple(
        replace(j, placement=Placement.of(j.placement.as_dict()) if j.placement else None)
        for j in view.running
    )
    return ClusterView(now, nodes, tuple([*view.pending]), running)


def timed(
    spec: str, view: ClusterView, runs: int, same_view: bool = False, collector: bool = False
) -> tuple[list[float], list[float], int]:
    """Wall and CPU milliseconds of each of `runs` passes (after one warm-up), and
    the decisions of the last pass."""
    policy = create(spec)
    decided = one_pass(policy, view, collector)
    times, cpu = [], []
    for k in range(runs):
        this = view if same_view else rebuilt(view, view.now + k + 1)
        t0, c0 = time.perf_counter(), time.process_time()
        decided = one_pass(policy, this, collector)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return times, cpu, decided


def p99(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node [8]")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=9, help="timed passes per cell [9]")
    parser.add_argument("--policy", default=POLICIES, help="comma-separated policies")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--profile", help="POLICY:half|full: print its cProfile top 25 instead")
    parser.add_argument("--sort", default="tottime", help="cProfile sort key [tottime]")
    parser.add_argument("--pin", action="store_true", help="pin to one CPU core")
    parser.add_argument(
        "--same-view",
        action="store_true",
        help="hand every pass the one snapshot object (not rebuilt as the live server does)",
    )
    parser.add_argument(
        "--collector-on",
        action="store_true",
        help="leave the garbage collector on in the passes (the live server holds it off)",
    )
    args = parser.parse_args()

    if args.pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    print(describe())
    print(speed_line())
    shape = Shape(nodes=args.nodes, gpus_per_node=args.gpus, pending=args.pending)
    views: dict[tuple[bool, bool], ClusterView] = {}

    def view_of(typed: bool, full: bool) -> ClusterView:
        key = (typed, full)
        if key not in views:
            # Full: every GPU busy and no running job preemptible, so nothing
            # can start (a pass that decides nothing).
            changes = {"free_share": 0.0, "preemptible": 0.0} if full else {"free_share": 0.5}
            types = TYPES if typed else ()
            views[key] = scale_view(replace(shape, gpu_types=types, **changes), args.seed)
        return views[key]

    if args.profile:
        spec, _, case = args.profile.partition(":")
        name, _, typed = spec.partition("/")
        view = view_of(bool(typed), case == "full")
        policy = create(name)
        one_pass(policy, view)
        this = view if args.same_view else rebuilt(view, view.now + 1)
        profile = cProfile.Profile()
        profile.enable()
        one_pass(policy, this)
        profile.disable()
        pstats.Stats(profile).sort_stats(args.sort).print_stats(25)
        return 0

    half = view_of(False, False)
    print(
        f"cluster: {args.nodes:,} nodes x {args.gpus} GPUs, {len(half.pending):,} waiting; "
        f"half free: {half.free_gpus:,} GPUs free, {len(half.running):,} running; "
        f"{args.runs} timed passes a cell (p99 of so few is near the slowest); "
        + ("one snapshot object for every pass" if args.same_view else "snapshot rebuilt each pass")
        + ("; collector on in passes" if args.collector_on else "; collector held off as live")
    )
    print(
        "wall ms p50 and p99 of the timed passes; CPU ms of the fastest (least moved by other load)"
    )
    print(
        f"{'policy':<20} {'half p50':>9} {'p99':>7} {'cpu':>7} {'starts':>7} "
        f"{'full p50':>9} {'p99':>7} {'cpu':>7} {'decided':>7}  goal ms (half/full)"
    )
    for spec in args.policy.split(","):
        name, _, typed = spec.partition("/")
        goal = GOALS.get(name, DEFAULT_GOAL)
        cells = []
        for full in (False, True):
            view = view_of(bool(typed), full)
            times, cpu, decided = timed(name, view, args.runs, args.same_view, args.collector_on)
            cells.append((statistics.median(times), p99(times), min(cpu), decided))
        (hp50, hp99, hcpu, hd), (fp50, fp99, fcpu, fd) = cells
        met = "met" if hp99 <= goal[0] and fp99 <= goal[1] else "NOT met"
        print(
            f"{spec:<20} {hp50:>9.1f} {hp99:>7.1f} {hcpu:>7.1f} {hd:>7,} "
            f"{fp50:>9.1f} {fp99:>7.1f} {fcpu:>7.1f} {fd:>7,}  {goal[0]:g}/{goal[1]:g} {met}"
        )
    print(speed_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
