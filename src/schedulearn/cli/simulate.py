"""`schedulearn simulate`: compare policies on a workload in the trace-driven simulator.

Thin over `schedulearn.sim.runner`: parse the options, run every policy
on every workload, then render a Rich table (one row per policy and
workload), and optionally JSON (`--json`) and PNG plots (`--plot`).
Input a user can fix (unknown policy, bad spec, missing file) is
reported as one line saying what to change, with exit status 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from schedulearn.cli.common import err

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID
    from rich.table import Table

    from schedulearn.sim.jobs import Workload
    from schedulearn.sim.results import SimResult
    from schedulearn.sim.runner import SpeedOptions
    from schedulearn.sim.tenant_runs import TenantRun

PROGRESS_FROM_JOBS = 2000
# Seconds between progress lines when stderr is not a terminal (a file, a CI log).
PROGRESS_LINE_SECONDS = 5.0
# The columns left out, in this order, until the table fits a terminal: the
# policy, its jobs, mean JCT and those not listed here always stay.
SIMULATE_DROP = (
    "wall",
    "migrate",
    "median",
    "p99",
    "preempt",
    "fairness",
    "deadlines met",
    "p95",
    "wait",
    "GPU util",
    "makespan",
)

HELP = """Replay a workload on a simulated cluster under one or more policies.

WORKLOAD is a trace CSV (Philly, Pollux or Tiresias format) or a spec:
poisson:n=100:rate=0.01, uniform:n=100:window=3600, bursts:5,10,15,20,
tetris, philly[:path=FILE], pollux[:path=FILE], tiresias[:path=FILE].
A directory stands for every CSV in it; repeat --workload for several
(they run in parallel processes, with a mean row per policy). A Pollux
CSV or directory with ':adaptive' has adaptive jobs (1..64 GPUs, batch
chosen per epoch), e.g. workload-6.csv:adaptive.
CLUSTER is a shape such as 3x4, 2x8+4x4, 36x1:k80+24x4:v100:cpus=48:mem=256,
2x8:label=ib+4x4 (node labels, for --constraint), or a Tiresias cluster
CSV; without it the workload's own cluster is used.
--tenants philly makes the Philly trace's virtual clusters queues
guaranteed GPUs in proportion to their GPU-hours, rounded down, the rest
lent by weight (--tenants FILE: a TOML
queue file) and runs each policy under the fair-share layer; a
per-queue report compares each queue with its run alone on its
guaranteed GPUs. See docs/simulator.md."""


def _fmt(seconds: float) -> str:
    """Seconds, compact: 6,626 / 13.6h / 4.5d."""
    if seconds < 100_000:
        return f"{seconds:,.0f}"
    if seconds < 100 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _out() -> Console:
    from rich.console import Console

    out = Console()
    if not out.is_terminal:
        # Piped or captured output has no width to respect; keep the table on one line per row.
        out = Console(width=200)
    return out


def render_table(results: list[SimResult]) -> Table:
    from rich.table import Table

    multi = len({r.workload for r in results}) > 1
    deadlines = any(r.summary.deadlines for r in results)
    table = Table(
        title="Simulated policies (times in seconds unless marked h or d)",
        header_style="bold",
        caption="JCT: job completion time; wait: mean queueing delay; "
        "fairness: Jain's index of slowdowns; wall: seconds to simulate",
    )
    if multi:
        table.add_column("workload")
    table.add_column("policy")
    names = ["jobs", "makespan", "mean JCT", "median", "p95", "p99", "wait", "GPU util"]
    names += ["deadlines met"] if deadlines else []
    names += ["preempt", "migrate", "fairness", "wall"]
    for name in names:
        table.add_column(name, justify="right")
    for r in results:
        s = r.summary
        jobs = f"{s.finished}" if not s.unfinished else f"{s.finished} (+{s.unfinished} stuck)"
        row = [
            r.policy,
            jobs,
            _fmt(s.makespan),
            _fmt(s.mean_jct),
            _fmt(s.median_jct),
            _fmt(s.p95_jct),
            _fmt(s.p99_jct),
            _fmt(s.mean_queueing_delay),
            f"{100 * s.gpu_utilisation:.1f}%",
            *([f"{s.deadlines_met}/{s.deadlines}" if s.deadlines else "-"] if deadlines else []),
            str(s.preemptions),
            str(s.migrations),
            f"{s.fairness:.3f}",
            f"{r.wall_seconds:.2f}",
        ]
        table.add_row(*([r.workload, *row] if multi else row))
    if multi:
        for name, runs in _by_policy(results).items():
            table.add_row(*_mean_row(name, runs, deadlines), style="bold")
    return table


def _by_policy(results: list[SimResult]) -> dict[str, list[SimResult]]:
    out: dict[str, list[SimResult]] = {}
    for r in results:
        out.setdefault(r.policy, []).append(r)
    return out


def _mean_row(policy: str, runs: list[SimResult], deadlines: bool) -> list[str]:
    """The mean over workloads of one policy's figures (sums for counts and wall time)."""

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    ss = [r.summary for r in runs]
    unfinished = sum(s.unfinished for s in ss)
    finished = sum(s.finished for s in ss)
    met = sum(s.deadlines_met for s in ss)
    due = sum(s.deadlines for s in ss)
    return [
        f"mean of {len(runs)}",
        policy,
        f"{finished}" if not unfinished else f"{finished} (+{unfinished} stuck)",
        _fmt(mean([s.makespan for s in ss])),
        _fmt(mean([s.mean_jct for s in ss])),
        _fmt(mean([s.median_jct for s in ss])),
        _fmt(mean([s.p95_jct for s in ss])),
        _fmt(mean([s.p99_jct for s in ss])),
        _fmt(mean([s.mean_queueing_delay for s in ss])),
        f"{100 * mean([s.gpu_utilisation for s in ss]):.1f}%",
        *([f"{met}/{due}" if due else "-"] if deadlines else []),
        str(sum(s.preemptions for s in ss)),
        str(sum(s.migrations for s in ss)),
        f"{mean([s.fairness for s in ss]):.3f}",
        f"{sum(r.wall_seconds for r in runs):.2f}",
    ]


def simulate(
    workload: Annotated[
        list[str],
        typer.Option(
            "--workload",
            "-w",
            help="Spec, trace CSV or directory of CSVs; repeat for several workloads",
            metavar="SPEC|PATH|DIR",
        ),
    ],
    policy: Annotated[
        str, typer.Option("--policy", "-p", help="Comma-separated policy specs, e.g. fifo,tiresias")
    ] = "fifo",
    cluster: Annotated[
        str | None, typer.Option("--cluster", "-c", help="Cluster shape, e.g. 3x4 or 2x8+4x4")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for generated workloads")] = 0,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write results as JSON to FILE ('-' = stdout)")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write PNG plots into this directory")
    ] = None,
    apps: Annotated[
        Path | None,
        typer.Option("--apps", help="Pollux pollux/apps directory (measured speed tables)"),
    ] = None,
    restart_cost: Annotated[
        float | None,
        typer.Option("--restart-cost", help="Seconds lost per resume or resize [default: 30]"),
    ] = None,
    efficiency: Annotated[
        float | None,
        typer.Option("--efficiency", help="Linear scaling efficiency per added GPU [default: 0.9]"),
    ] = None,
    spread_penalty: Annotated[
        float | None,
        typer.Option("--spread-penalty", help="Slowdown per node beyond the fewest [default: 0.1]"),
    ] = None,
    gpu_speed: Annotated[
        str, typer.Option("--gpu-speed", help="Relative speed per GPU type, e.g. k80=0.3,v100=1")
    ] = "",
    jobs_json: Annotated[
        bool, typer.Option("--jobs-json", help="Include every job's record in the JSON")
    ] = False,
    constraint: Annotated[
        list[str] | None,
        typer.Option(
            "--constraint",
            help="A node label jobs need (label nodes in --cluster, e.g. 2x8:label=ib+4x4); "
            "repeatable",
        ),
    ] = None,
    constrained: Annotated[
        float, typer.Option("--constrained", help="Share of the jobs --constraint applies to")
    ] = 1.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table or progress bar")] = False,
    round_seconds: Annotated[
        float | None,
        typer.Option("--round", help="Decide only every SECONDS (Pollux's simulator: 60)"),
    ] = None,
    artifact_time: Annotated[
        bool,
        typer.Option(
            "--artifact-time",
            help="Measured speed model: time as Pollux's simulator computes it (every "
            "epoch ends on a whole second; GPUs ranked from the node holding the most)",
        ),
    ] = False,
    processes: Annotated[
        int | None,
        typer.Option("--processes", help="Parallel runs for several workloads [default: cores]"),
    ] = None,
    tenants: Annotated[
        str | None,
        typer.Option(
            "--tenants",
            help="Queues: philly (the trace's virtual clusters) or a TOML queue file",
            metavar="philly|FILE",
        ),
    ] = None,
    min_run: Annotated[
        float | None,
        typer.Option("--min-run", help="With --tenants: seconds before reclaim [default: 300]"),
    ] = None,
    half_life: Annotated[
        float | None,
        typer.Option(
            "--half-life",
            help="With --tenants: usage half-life in seconds, 0 for none [default: a week]",
        ),
    ] = None,
) -> None:
    # The simulator and Rich load here, when the command runs: `simulate --help`
    # (and every other command) starts without them.
    from schedulearn.core.registry import UnknownPolicyError
    from schedulearn.sim.engine import PolicyError
    from schedulearn.sim.jobs import SimInputError
    from schedulearn.sim.runner import cluster_for, run_all, run_parallel
    from schedulearn.sim.workloads.spec import parse_workload

    out = _out()
    try:
        workloads = [w for text in workload for w in parse_workload(text, seed)]
        if constraint:
            from schedulearn.sim.workloads.constraints import with_constraints

            workloads = [with_constraints(w, constraint, constrained, seed) for w in workloads]
        _check_combinations(len(workloads), tenants, min_run, half_life, round_seconds, processes)
        speed = _speed_options(
            apps, restart_cost, efficiency, spread_penalty, gpu_speed, artifact_time
        )
        policies = policy.split(",")
        big = max(len(w) for w in workloads) >= PROGRESS_FROM_JOBS
        fair: list[TenantRun] = []
        if tenants is not None:
            # Queues (and the fair-share layer) load only when asked for.
            from schedulearn.sim.tenant_runs import simulate_tenants

            fair = simulate_tenants(
                workloads[0],
                cluster_for(workloads[0], cluster),
                policies,
                tenants,
                speed,
                300.0 if min_run is None else min_run,
                half_life,
                processes,
            )
            results = [r.shared for r in fair]
        elif len(workloads) > 1 and processes != 1:
            # Several workloads: one process per run.
            done = _run_done if big and not quiet else None
            if done is not None:
                _announce(len(workloads) * len(policies), workloads, "as each run ends")
            results = run_parallel(
                workloads, policies, cluster, speed, round_seconds, processes, done
            )
        elif big and not quiet:
            results = _run_with_progress(workloads, policies, cluster, speed, round_seconds)
        else:
            results = run_all(workloads, policies, cluster, speed, round_seconds=round_seconds)
    except (SimInputError, UnknownPolicyError, PolicyError) as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if not quiet:
        _print_results(out, results, fair)
    if json_file is not None:
        _write_json(json_file, results, fair, jobs_json)
    if plot is not None:
        from schedulearn.sim.plots import plot_results

        for path in plot_results(results, plot):
            if not quiet:
                err.print(f"wrote {path}", highlight=False)


def _check_combinations(
    workloads: int,
    tenants: str | None,
    min_run: float | None,
    half_life: float | None,
    round_seconds: float | None,
    processes: int | None,
) -> None:
    """`SimInputError` for options that do not go together or out of range."""
    from schedulearn.sim.jobs import SimInputError

    if tenants is None and (min_run is not None or half_life is not None):
        raise SimInputError("--min-run and --half-life apply to queues; add --tenants")
    if tenants is not None and (workloads > 1 or round_seconds is not None):
        raise SimInputError("--tenants runs one workload without --round; give one --workload")
    if round_seconds is not None and not round_seconds > 0:
        raise SimInputError(f"--round must be a positive number of seconds, not {round_seconds}")
    if processes is not None and processes < 1:
        raise SimInputError(f"--processes must be 1 or more, not {processes}")


def _speed_options(
    apps: Path | None,
    restart_cost: float | None,
    efficiency: float | None,
    spread_penalty: float | None,
    gpu_speed: str,
    artifact_time: bool,
) -> SpeedOptions:
    """The speed model's options; `given` names the ones set on the command line."""
    from schedulearn.sim.runner import SpeedOptions

    given = {
        name
        for name, value in (
            ("--restart-cost", restart_cost),
            ("--efficiency", efficiency),
            ("--spread-penalty", spread_penalty),
            ("--gpu-speed", gpu_speed or None),
        )
        if value is not None
    }
    defaults = SpeedOptions()
    return SpeedOptions(
        apps=apps,
        efficiency=defaults.efficiency if efficiency is None else efficiency,
        spread_penalty=defaults.spread_penalty if spread_penalty is None else spread_penalty,
        restart_cost=defaults.restart_cost if restart_cost is None else restart_cost,
        gpu_speed=gpu_speed,
        artifact_time=artifact_time,
        given=frozenset(given),
    )


def _run_with_progress(
    workloads: list[Workload],
    policies: list[str],
    cluster: str | None,
    speed: SpeedOptions,
    round_seconds: float | None,
) -> list[SimResult]:
    """`run_all` with a progress bar per run on stderr (for big workloads), or,
    when stderr is not a terminal, a progress line every few seconds."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from schedulearn.sim.runner import run_all

    if not err.is_terminal:
        import time

        from schedulearn.cli.progress_lines import ProgressLines

        _announce(
            len(workloads) * len(policies),
            workloads,
            f"progress every {PROGRESS_LINE_SECONDS:.0f} s",
        )
        lines = ProgressLines(sys.stderr, PROGRESS_LINE_SECONDS, time.monotonic)
        return run_all(workloads, policies, cluster, speed, lines, round_seconds)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} jobs"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        tasks: dict[str, TaskID] = {}

        def report(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done)

        return run_all(workloads, policies, cluster, speed, report, round_seconds)


def _announce(runs: int, workloads: list[Workload], when: str) -> None:
    """The first progress line: how many runs, how big, when more lines come."""
    most = max(len(w) for w in workloads)
    sys.stderr.write(
        f"simulate: {runs} run{'s' if runs > 1 else ''} of up to {most:,} jobs; {when}\n"
    )
    sys.stderr.flush()


def _run_done(result: SimResult, done: int, total: int) -> None:
    from schedulearn.cli.progress_lines import run_ended

    label = f"{result.workload} / {result.policy}"
    run_ended(sys.stderr, label, result.wall_seconds, done, total)


def _print_results(out: Console, results: list[SimResult], fair: list[TenantRun]) -> None:
    """The table, a warning per run that left jobs unfinished, and the per-queue reports."""
    from schedulearn.cli.fitting import print_fitted

    print_fitted(out, render_table(results), SIMULATE_DROP, err)
    stuck = [r for r in results if r.summary.unfinished]
    for r in stuck:
        err.print(
            f"[yellow]warning:[/yellow] {r.policy} left {r.summary.unfinished} jobs of "
            f"{r.workload} unfinished (it started nothing while they waited)",
            highlight=False,
        )
    if fair:
        from schedulearn.sim.tenants import render as render_fairness
    for run in fair:
        out.print(f"\n{run.shared.policy}: per queue (ratio: mean JCT shared / alone)")
        out.print(render_fairness(run.fairness), highlight=False)


def _write_json(
    json_file: Path, results: list[SimResult], fair: list[TenantRun], jobs_json: bool
) -> None:
    from schedulearn.core.registry import available

    payload = {
        "policies_available": available(),
        "results": [r.to_dict(jobs=jobs_json) for r in results],
    }
    if fair:
        payload["fairness"] = {run.shared.policy: run.fairness.to_dict() for run in fair}
    text = json.dumps(payload, indent=2)
    if str(json_file) == "-":
        sys.stdout.write(text + "\n")
    else:
        # Like --plot's folder: `--plot out/ --json out/results.json` on a
        # fresh clone wrote the JSON first, into a folder not made yet.
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(text + "\n")


def register(app: typer.Typer) -> None:
    """Add `simulate` to the app."""
    app.command("simulate", help=HELP)(simulate)
