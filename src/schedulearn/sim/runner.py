"""Run several policies over several workloads on one cluster, as `schedulearn simulate` does.

This is the layer between the CLI (or a script) and the engine: it
builds the speed model from `SpeedOptions`, picks the cluster (the one
given, or the workload's own default), creates a fresh policy object
for each run from the registry, and reports progress through a callback.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from schedulearn.core.registry import UnknownPolicyError, create
from schedulearn.sim.cluster import ClusterSpec, parse_cluster
from schedulearn.sim.engine import Simulator
from schedulearn.sim.jobs import SimInputError, Workload
from schedulearn.sim.measured import MeasuredSpeed
from schedulearn.sim.results import SimResult
from schedulearn.sim.speed import LinearSpeed, SpeedModel, TypeFactors
from schedulearn.sim.workloads.adaptive import is_adaptive, make_adaptive

# (run label, jobs finished, jobs in the workload)
RunProgress = Callable[[str, int, int], None]
# A run of `run_parallel` ended: its result, how many have ended, of how many.
RunDone = Callable[[SimResult, int, int], None]


@dataclass(frozen=True, slots=True)
class SpeedOptions:
    """The speed model's settings, as the CLI gives them."""

    apps: Path | None = None
    efficiency: float = 0.9
    spread_penalty: float = 0.1
    start_cost: float = 0.0
    restart_cost: float = 30.0
    realloc_cost: float = 30.0
    gpu_speed: str = ""
    # Measured model only: time as Pollux's simulator computes it
    # (`simulate --artifact-time`; see `MeasuredSpeed`).
    artifact_time: bool = False
    # Measured model only: "delaunay" interpolates step times of placements no
    # table measured as Pollux's simulator does (needs scipy; `sim.interp3d`).
    interpolation: str = "separable"
    # The options the user gave explicitly (CLI names, e.g. "--efficiency"):
    # one the chosen model does not use is refused rather than ignored.
    given: frozenset[str] = frozenset()

    def build(self, workloads: Sequence[Workload] = ()) -> SpeedModel:
        model = self._build(workloads)
        if self.artifact_time and not (isinstance(model, MeasuredSpeed) and model.apps):
            raise SimInputError(
                "--artifact-time applies to the measured speed model only (Pollux "
                "workloads with their pollux/apps tables); drop it"
            )
        if isinstance(model, MeasuredSpeed) and model.apps:
            linear_jobs = any(model.tables_of(j) is None for w in workloads for j in w.jobs)
            unused = ["--efficiency", "--spread-penalty"]
            unused += [] if linear_jobs else ["--gpu-speed"]
            for option in unused:
                if option in self.given:
                    raise SimInputError(
                        f"{option} is not used by the measured speed model (the Pollux tables "
                        "give each application's speed on every placement); drop it"
                    )
        return model

    def _build(self, workloads: Sequence[Workload]) -> SpeedModel:
        # `--gpu-speed gavel`, or a Gavel workload: measured steps/s per GPU type.
        gavel = self.gpu_speed.strip().lower() == "gavel"
        linear = LinearSpeed(
            efficiency=self.efficiency,
            spread_penalty=self.spread_penalty,
            start_cost=self.start_cost,
            restart_cost=self.restart_cost,
            gpu_speed=TypeFactors() if gavel else TypeFactors.parse(self.gpu_speed),
        )
        if gavel or any(w.source == "gavel" for w in workloads):
            # Gavel's tables and the estimator load only for Gavel workloads.
            from schedulearn.sim.gavel import GavelSpeed

            return GavelSpeed(linear=linear)
        apps = self.apps or find_apps(workloads)
        if apps is None and not any(j.app for w in workloads for j in w.jobs):
            return linear
        # --restart-cost is the measured model's cost of a (re)allocation too.
        realloc = self.restart_cost if "--restart-cost" in self.given else self.realloc_cost
        return MeasuredSpeed(apps, linear, realloc, self.artifact_time, self.interpolation)


def find_apps(workloads: Sequence[Workload]) -> Path | None:
    """The Pollux tables next to a Pollux workload file (`.../workloads/x.csv` -> `.../apps`)."""
    for w in workloads:
        if w.source and any(j.app for j in w.jobs):
            candidate = Path(w.source).resolve().parent.parent / "apps"
            if candidate.is_dir():
                return candidate
    return None


def check_policies(specs: Sequence[str]) -> list[str]:
    """Validate policy specs before any run starts (unknown names list the valid ones)."""
    cleaned = [s.strip() for s in specs if s.strip()]
    if not cleaned:
        raise SimInputError("no policy given; use --policy fifo,tiresias (any registered names)")
    for spec in cleaned:
        try:
            create(spec)
        except UnknownPolicyError as exc:  # names the policy and what its options take
            raise SimInputError(str(exc)) from None
    return cleaned


def adapt(workload: Workload, model: SpeedModel) -> Workload:
    """The workload with adaptive jobs if its spec asked for them (`adaptive=true`)."""
    if not is_adaptive(workload):
        return workload
    if not isinstance(model, MeasuredSpeed) or not model.apps:
        raise SimInputError(
            f"adaptive jobs need the measured tables; workload {workload.name!r} names no "
            "measured application, or pass --apps with the Pollux pollux/apps directory"
        )
    return make_adaptive(workload, model, int(workload.params["adaptive"]))


def cluster_for(workload: Workload, given: str | None) -> ClusterSpec:
    if given:
        return parse_cluster(given)
    if workload.default_cluster:
        return parse_cluster(workload.default_cluster)
    raise SimInputError(
        f"workload {workload.name!r} has no default cluster; give one with --cluster, e.g. 3x4"
    )


def run_all(
    workloads: Sequence[Workload],
    policies: Sequence[str],
    cluster: str | None = None,
    speed: SpeedOptions | None = None,
    on_progress: RunProgress | None = None,
    round_seconds: float | None = None,
) -> list[SimResult]:
    """Every policy on every workload, in that order; one fresh policy object per run.

    `round_seconds`: decide only at multiples of it (see the engine)."""
    specs = check_policies(policies)
    model = (speed or SpeedOptions()).build(workloads)
    workloads = [adapt(w, model) for w in workloads]
    results = []
    for workload in workloads:
        spec_cluster = cluster_for(workload, cluster)
        for spec in specs:
            label = f"{workload.name} / {spec}"
            progress = None if on_progress is None else partial(on_progress, label)
            sim = Simulator(
                workload,
                spec_cluster,
                create(spec),
                model,
                on_progress=progress,
                policy_name=spec,
                round_seconds=round_seconds,
            )
            results.append(sim.run())
    return results


def _one(
    task: tuple[Workload, str, str | None, SpeedOptions | None, float | None],
) -> SimResult:
    workload, spec, cluster, speed, round_seconds = task
    (result,) = run_all([workload], [spec], cluster, speed, round_seconds=round_seconds)
    return result


def _one_at(
    item: tuple[int, tuple[Workload, str, str | None, SpeedOptions | None, float | None]],
) -> tuple[int, SimResult]:
    """`_one` with the run's place, so results that come back as they end are put in order."""
    index, task = item
    return index, _one(task)


def run_parallel(
    workloads: Sequence[Workload],
    policies: Sequence[str],
    cluster: str | None = None,
    speed: SpeedOptions | None = None,
    round_seconds: float | None = None,
    processes: int | None = None,
    on_run_done: RunDone | None = None,
) -> list[SimResult]:
    """As `run_all`, one process per (workload, policy) run, up to `processes` at once.

    Results come back in `run_all`'s order. Each process builds its own
    speed model; bad input is reported before any process starts.
    `on_run_done(result, done, total)` is called as each run ends, in the
    order they end.
    """
    specs = check_policies(policies)
    model = (speed or SpeedOptions()).build(workloads)
    for w in workloads:
        adapt(w, model)
        cluster_for(w, cluster)
    tasks = [(w, spec, cluster, speed, round_seconds) for w in workloads for spec in specs]
    workers = min(len(tasks), processes or os.cpu_count() or 1)
    done: list[SimResult | None] = [None] * len(tasks)

    def finished(index: int, result: SimResult) -> None:
        done[index] = result
        if on_run_done is not None:
            on_run_done(result, sum(r is not None for r in done), len(tasks))

    if workers <= 1:
        for index, task in enumerate(tasks):
            finished(index, _one(task))
    else:
        import multiprocessing  # several workloads only: one process per run

        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for index, result in pool.imap_unordered(_one_at, enumerate(tasks), chunksize=1):
                finished(index, result)
    return [r for r in done if r is not None]
