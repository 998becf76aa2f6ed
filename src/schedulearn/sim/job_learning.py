"""What each simulated job that names a measured application learns of itself, as a runtime does.

A job under AdaptDL (or `schedulearn.runtime.AdaptiveBatch` live)
measures its step times on every allocation it runs on and its gradient
statistics as it trains, fits its goodput model from them, and picks
each batch size with that fitted model: it never sees the true speed
tables. `JobLearning` plays that part in the simulator, per run:

- `curve` plans an adaptive job's segment on a placement: at each epoch
  the batch that its *fitted* model (`core.goodput`, from the steps it
  measured so far plus those it measures on this placement) rates best,
  with the gradient statistics it measures there; the progress it then
  makes comes from the true tables (`sim.measured`). A job never run
  starts at its smallest batch, as the model's prior does.
- `observe` records, as the job reaches each epoch, the step it measured
  there and its latest gradient statistics: the job's profile.
- `report` is the job's `GoodputReport`, the same record a live job
  sends: limits, configuration, statistics, progress so far, and its
  total only when its spec declares one (`SimJob.declares_total`).
- `ended` keeps the progress every finished job made, by model: the
  estimates learned from ended jobs (`estimate`), when the workload asks
  for them (`lengths=learned`), as the live predictions module learns
  durations. A job's own total is never one of them.

It owns only these per-job observations; the engine owns the run state.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from schedulearn.core.goodput import (
    BatchLimits,
    GoodputReport,
    JobGoodput,
    StepSample,
    batch_configs,
)
from schedulearn.core.views import Placement
from schedulearn.sim.jobs import SimJob
from schedulearn.sim.measured import AppTables, EpochCurve, MeasuredSpeed
from schedulearn.sim.runstate import RunState

_Config = tuple[int, int, int]  # total batch, atomic local batch, accumulation steps


@dataclass(slots=True)
class _Plan:
    """One segment: the configuration and measured step at each epoch from `start`."""

    nodes: int
    replicas: int
    start: int
    configs: dict[int, _Config]
    steps: dict[int, StepSample]
    observed: int = -1  # the last epoch recorded in the profile


@dataclass(slots=True)
class _Profile:
    samples: dict[tuple[int, int, int], StepSample] = field(default_factory=dict)
    grad: tuple[float, float] | None = None
    config: _Config | None = None  # the last configuration run
    plan: _Plan | None = None


def _key(sample: StepSample) -> tuple[int, int, int]:
    # One sample per half-octave of local batch and allocation: a runtime's
    # profile is as coarse, and each new sample means a refit.
    return sample.nodes, sample.replicas, round(2 * math.log2(max(sample.atomic_bsz, 1)))


class JobLearning:
    """Per-job profiles (steps, statistics), the batch each adaptive job picks, and
    the totals of ended jobs."""

    def __init__(self, speed: MeasuredSpeed, learned: bool = False) -> None:
        self.speed = speed
        self.learned = learned
        self._profiles: dict[int, _Profile] = {}
        self._totals: dict[str, list[float]] = {}

    # --- segments ------------------------------------------------------------

    def curve(self, run: RunState, placement: Placement) -> EpochCurve | None:
        """The segment's curve for a job that picks its own batch (None: the speed
        model's, for a job of fixed batch or without tables); plans its steps."""
        job = run.job
        tables = self.speed.tables_of(job)
        if tables is None or placement.num_gpus == 0:
            return None
        counts = self.speed.counts_of(placement)
        profile = self._profiles.setdefault(job.id, _Profile())
        start = min(bisect.bisect_right(tables.epoch_ends, run.done), tables.epochs - 1)
        if job.batch_size:
            atomic, accum = tables.batch_split(job.batch_size, sum(counts))
            config = (sum(counts) * atomic * (accum + 1), atomic, accum)
            step, sync = tables.throughput(counts, atomic)
            sample = StepSample(len(counts), sum(counts), atomic, step, sync)
            configs = dict.fromkeys(range(start, tables.epochs), config)
            steps = dict.fromkeys(range(start, tables.epochs), sample)
            profile.plan = _Plan(len(counts), sum(counts), start, configs, steps)
            return None
        return self._adaptive(tables, counts, profile, start)

    def _adaptive(
        self, tables: AppTables, counts: tuple[int, ...], profile: _Profile, start: int
    ) -> EpochCurve:
        nodes, gpus = len(counts), sum(counts)
        limits = tables.limits()
        allowed = batch_configs(limits, gpus)
        if not allowed:
            # More GPUs than the batch limits allow: the smallest local batch each.
            atomic = max(1, tables.max_batch // gpus)
            allowed = ((gpus * atomic, atomic, 0),)
        known = dict(profile.samples)  # grows as the segment measures new steps
        batch = profile.config[0] if profile.config else limits.init_batch
        measured: dict[int, tuple[float, float]] = {}
        rates = [1.0] * tables.epochs  # epochs before `start` are never run here
        configs: dict[int, _Config] = {}
        steps: dict[int, StepSample] = {}
        for e in range(start, tables.epochs):
            # The statistics it measures in this epoch, at the batch it runs.
            sqr, var = tables.grad_stats(batch, e)
            config = self._choose(limits, known, sqr, var, nodes, gpus, allowed)
            for _ in range(3):
                sample = self._measure(tables, counts, config[1], measured)
                if _key(sample) in known:
                    break
                # A step not measured before: the fit changes, so does the choice.
                known[_key(sample)] = sample
                config = self._choose(limits, known, sqr, var, nodes, gpus, allowed)
            sample = self._measure(tables, counts, config[1], measured)
            batch, atomic, accum = config
            step, sync = measured[atomic]
            tsqr, tvar = tables.grad_stats(batch, e)
            scale = batch / tables.init_batch
            rates[e] = (tvar + tsqr) / (tvar / scale + tsqr) / (step + (step - sync) * accum)
            configs[e], steps[e] = config, sample
        profile.plan = _Plan(nodes, gpus, start, configs, steps)
        choices = tuple(configs.get(e, allowed[0]) for e in range(tables.epochs))
        return EpochCurve(tables.epoch_ends, tuple(rates), choices, self.speed.artifact_time)

    @staticmethod
    def _measure(
        tables: AppTables,
        counts: tuple[int, ...],
        atomic: int,
        measured: dict[int, tuple[float, float]],
    ) -> StepSample:
        got = measured.get(atomic)
        if got is None:
            got = measured[atomic] = tables.throughput(counts, atomic)
        return StepSample(len(counts), sum(counts), atomic, got[0], got[1])

    @staticmethod
    def _choose(
        limits: BatchLimits,
        known: dict[tuple[int, int, int], StepSample],
        sqr: float,
        var: float,
        nodes: int,
        gpus: int,
        allowed: tuple[_Config, ...],
    ) -> _Config:
        """The configuration the job's fitted model rates best (its smallest
        batch while it has measured nothing)."""
        info = JobGoodput(limits, tuple(known.values()), sqr, var)
        choice = info.model().best(nodes, gpus)
        if choice is None:
            return min(allowed)
        return choice.batch, choice.atomic, choice.accum

    # --- observations ----------------------------------------------------------

    def observe(self, run: RunState, done: float) -> None:
        """Record the steps and statistics the job measured up to `done` units."""
        profile = self._profiles.get(run.job.id)
        tables = self.speed.tables_of(run.job)
        if profile is None or profile.plan is None or tables is None:
            return
        plan = profile.plan
        now = min(bisect.bisect_right(tables.epoch_ends, done), tables.epochs - 1)
        if now <= plan.observed:
            return
        for e in range(max(plan.start, plan.observed + 1), now + 1):
            sample = plan.steps.get(e)
            if sample is not None:
                profile.samples.setdefault(_key(sample), sample)
        plan.observed = now
        config = plan.configs.get(now)
        if config is not None:
            profile.config = config
            profile.grad = tables.grad_stats(config[0], now)

    def stop(self, run: RunState) -> None:
        """The segment ended at `run.done`: its observations are kept, its plan dropped."""
        self.observe(run, run.done)
        profile = self._profiles.get(run.job.id)
        if profile is not None:
            profile.plan = None

    def ended(self, run: RunState) -> None:
        """A job finished: its total progress joins the learned estimates."""
        self._totals.setdefault(_model_of(run.job), []).append(run.done)
        self._profiles.pop(run.job.id, None)

    def estimate(self, job: SimJob) -> float | None:
        """The total progress learned from ended jobs of the same model (None: none)."""
        if not self.learned:
            return None
        totals = self._totals.get(_model_of(job))
        return sum(totals) / len(totals) if totals else None

    # --- reports ---------------------------------------------------------------

    def report(self, run: RunState, done: float) -> GoodputReport | None:
        """The job's latest report, as a live runtime sends it (None: no tables)."""
        job = run.job
        tables = self.speed.tables_of(job)
        if tables is None:
            return None
        profile = self._profiles.get(job.id) or _Profile()
        plan = profile.plan
        limits = tables.limits(job.batch_size)
        config = profile.config or (job.batch_size or limits.init_batch, limits.init_batch, 0)
        nodes, replicas = (plan.nodes, plan.replicas) if plan else (1, 1)
        atomic = max(min(config[1], limits.max_local), limits.min_local)
        sqr, var = profile.grad if profile.grad else (None, None)
        return GoodputReport(
            init_batch=limits.init_batch,
            max_batch=limits.max_batch,
            min_local_batch=limits.min_local,
            max_local_batch=limits.max_local,
            batch_size=config[0],
            local_batch=atomic,
            accum_steps=config[2],
            replicas=replicas,
            nodes=nodes,
            grad_sqr=sqr,
            grad_var=var,
            progress=done,
            target=run.work if job.declares_total else None,
        )

    def goodput(self, run: RunState, done: float) -> JobGoodput | None:
        """What a policy may know of the job (`JobGoodput.of_report`)."""
        report = self.report(run, done)
        if report is None:
            return None
        profile = self._profiles.get(run.job.id)
        samples = tuple(profile.samples.values()) if profile else ()
        restarts = max(0, run.preemptions + run.resizes + run.migrations)
        estimate = self.estimate(run.job)
        return JobGoodput.of_report(report, samples, restarts, estimate, run.job.batch_size)


def _model_of(job: SimJob) -> str:
    return job.model or job.app or ""
