"""Our policies beside Pollux's published figures on its 8 tuned workloads (16 x 4 GPUs).

For each of `traces/pollux/workloads/workload-{1..8}.csv`, runs
`goodput` and `elastic-fifo` on the adaptive form of the workload (jobs
on 1..64 GPUs that pick their batch size; `workload-N.csv:adaptive`) and
`fifo`, `tiresias` and `srtf` on the workload as written (fixed GPU
count and batch), all on the measured speed model, and prints the mean
job completion time per workload and policy beside the published
Pollux and Tiresias figures (Pollux's artifact, OSDI'21), then the
checks of issue 13: `goodput`'s mean against 2,600 s, the workloads it
wins against Pollux, `elastic-fifo` against `fifo` on each workload, and
the wall time of the whole `goodput` run. `tiresias:mode=artifact` (the
rules of the Tiresias in Pollux's artifact) always decides every 60 s
and computes time as that artifact's simulator does (`--artifact-time`:
whole-second epochs, GPUs ranked from the node holding the most), and
is checked against the published Tiresias figures (issue 13: within
+-3% on each workload).

    uv run python bench/pollux_compare.py [--workloads 1-8] [--policies goodput,srtf]
        [--processes N] [--traces traces] [--round 60]

Runs go to a process pool (one run per workload and policy); the wall
times printed are the elapsed time of the whole bench and, per policy,
the sum of its runs' simulation times.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import time
from pathlib import Path

from schedulearn.sim.runner import SpeedOptions, run_all
from schedulearn.sim.workloads.spec import parse_workload

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = {
    "pollux": [2089, 3323, 2188, 2721, 2674, 2446, 3616, 2952],
    "tiresias (published)": [2474, 5145, 3876, 3280, 3501, 3470, 5480, 5080],
}
ADAPTIVE = {"goodput", "elastic-fifo"}
DEFAULT_POLICIES = "goodput,elastic-fifo,fifo,tiresias,tiresias:mode=artifact,srtf"
ARTIFACT = "tiresias:mode=artifact"
ARTIFACT_ROUND = 60.0  # the artifact's scheduling interval


def one_run(args: tuple[str, int, str, float | None]) -> tuple[str, int, float, float, int]:
    """(policy, workload number, mean JCT, simulation seconds, jobs unfinished)."""
    traces, number, spec, round_seconds = args
    path = Path(traces) / "pollux" / "workloads" / f"workload-{number}.csv"
    name = spec.split(":", 1)[0]
    workload = parse_workload(f"{path}:adaptive" if name in ADAPTIVE else str(path))
    speed = SpeedOptions()
    if spec == ARTIFACT:
        # The artifact's simulator: 60 s rounds and its rules of time.
        round_seconds = ARTIFACT_ROUND
        speed = SpeedOptions(artifact_time=True)
    (result,) = run_all(workload, [spec], "16x4", speed, round_seconds=round_seconds)
    s = result.summary
    return spec, number, s.mean_jct, result.wall_seconds, s.unfinished


def numbers(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{cpu}, {os.cpu_count()} cores, load {load:.1f}, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="1-8")
    parser.add_argument("--policies", default=DEFAULT_POLICIES)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--traces", default=str(REPO / "traces"))
    parser.add_argument(
        "--round", type=float, default=None, help="decide only every N s (Pollux: 60)"
    )
    args = parser.parse_args()
    ws = numbers(args.workloads)
    specs = [p.strip() for p in args.policies.split(",") if p.strip()]
    # The slowest runs first, so the pool's processes end together.
    tasks = [(args.traces, n, spec, args.round) for spec in specs for n in ws]
    tasks.sort(key=lambda t: t[2].split(":")[0] not in ADAPTIVE)
    # The heading first: the table's rows follow when every run has ended.
    width = max(len(s) for s in [*specs, *PUBLISHED]) + 2
    when = f"decisions every {args.round:g} s" if args.round else "decisions at every event"
    print(f"mean JCT (s) on 16 x 4 GPUs, workloads {args.workloads}, {when}", flush=True)
    print(f"{'policy':<{width}}" + "".join(f"{n:>8}" for n in ws) + f"{'mean':>9}", flush=True)
    started = time.perf_counter()
    with multiprocessing.Pool(max(1, args.processes)) as pool:
        results = pool.map(one_run, tasks, chunksize=1)
    elapsed = time.perf_counter() - started
    jct = {(spec, n): mean for spec, n, mean, _, _ in results}
    sim_wall = {spec: 0.0 for spec in specs}
    stuck = {(spec, n): u for spec, n, _, _, u in results if u}
    for spec, _, _, wall, _ in results:
        sim_wall[spec] += wall

    rows: dict[str, list[float]] = {}
    for name, figures in PUBLISHED.items():
        rows[name] = [float(figures[n - 1]) for n in ws]
    for spec in specs:
        rows[spec] = [jct[spec, n] for n in ws]
    for name, values in rows.items():
        label = f"{name} (adaptive)" if name.split(":")[0] in ADAPTIVE else name
        print(
            f"{label:<{width}}"
            + "".join(f"{v:>8,.0f}" for v in values)
            + f"{statistics.fmean(values):>9,.0f}"
        )
    for (spec, n), count in sorted(stuck.items()):
        print(f"warning: {spec} left {count} jobs of workload-{n} unfinished")
    pollux = rows["pollux"]
    for spec in specs:
        if spec.split(":")[0] == "goodput":
            mine = rows[spec]
            wins = sum(m < p for m, p in zip(mine, pollux, strict=True))
            print(
                f"{spec}: mean {statistics.fmean(mine):,.0f} s (goal <= 2,600; Pollux "
                f"{statistics.fmean(pollux):,.0f}), below Pollux on {wins} of {len(ws)} "
                f"(goal >= {min(6, len(ws))}), simulation {sim_wall[spec]:.1f} s in all"
            )
    if ARTIFACT in specs:
        published = rows["tiresias (published)"]
        off = [m / p - 1 for m, p in zip(rows[ARTIFACT], published, strict=True)]
        within = sum(abs(o) <= 0.03 for o in off)
        print(
            f"{ARTIFACT} (decisions every {ARTIFACT_ROUND:g} s, artifact time) against "
            "the published Tiresias: "
            + " ".join(f"{o:+.1%}" for o in off)
            + f"; within +-3% on {within} of {len(ws)} (goal: all)"
        )
    if "elastic-fifo" in specs and "fifo" in specs:
        better = sum(e < f for e, f in zip(rows["elastic-fifo"], rows["fifo"], strict=True))
        print(f"elastic-fifo (adaptive) below fifo on {better} of {len(ws)} workloads")
    print(
        f"wall {elapsed:.1f} s for {len(tasks)} runs on {args.processes} processes; "
        f"machine: {machine()}"
    )


if __name__ == "__main__":
    main()
