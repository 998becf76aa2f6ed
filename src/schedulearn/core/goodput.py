"""The goodput model of a data-parallel training job: throughput x statistical efficiency.

Pollux (Qiao et al., OSDI'21) rates an allocation by its *goodput*: how
fast a job makes progress towards convergence, not how many samples it
reads. This module re-implements that model with the standard library
only (Pollux fits it with scipy; the rules are read from petuum/adaptdl,
branch `osdi21-artifact`, `adaptdl/goodput.py`; none of its code is used).

- **Throughput.** The time of one optimiser step on `replicas` GPUs over
  `nodes` nodes with local batch `atomic` and `accum` extra
  gradient-accumulation steps is `accum * c + (c ** g + net ** g) ** (1 / g)`,
  where `c = alpha_c + beta_c * atomic` (forward and backward passes),
  `net` is `0` on one GPU, `alpha_r + beta_r * max(replicas - 2, 0)`
  within a node and `alpha_n + beta_n * max(replicas - 2, 0)` across
  nodes (ring all-reduce), and `g` (gamma, 1..10) is how far the
  synchronisation overlaps the last backward pass: 1 adds them, 10 is
  nearly their maximum (Pollux's 7-term model). Compute is a linear
  least-squares fit; the network lines and gamma are fitted to whole
  step times (`core.goodput_fit`), since the exposed sync time shrinks
  as the compute grows.
- **Statistical efficiency.** With the gradient statistics `sqr` (the
  squared norm of the true gradient) and `var` (its noise) measured at
  the initial batch size `init`, a batch `b = scale * init` makes
  `gain = (var + sqr) / (var / scale + sqr)` times the progress of one
  step at `init`; the efficiency is `gain / scale`, and the gradient
  noise scale `init * var / sqr` is the batch where it is one half.
- **Goodput** is progress per second, `gain / step_time`, in units of
  "steps at the initial batch size". A job picks, for its allocation,
  the batch size that maximises it within its limits.

Fitting (`fit_throughput`) follows Pollux's priors for what a job has
not yet been seen doing: with one local batch size observed, half the
compute time is taken as constant; with no multi-GPU observation the
network costs nothing (an optimistic model, so the scheduler tries a
bigger allocation and learns); with no multi-node observation, crossing
nodes costs 10% more than the intra-node figure. `GoodputModel.prior`
is the model of a job never run: linear speedup, unknown absolute speed.

No state lives here: everything is a frozen value or a pure function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import ClassVar

from schedulearn.core.goodput_fit import NetPoint, fit_network, nonneg_line, optim_time

BATCH_CANDIDATES = 16  # batch sizes tried per allocation, geometrically spaced
# Noise ratios within 3% share one model (the efficiency barely moves; fits are reused).
NOISE_STEP = 0.03


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What batch sizes a job may use.

    `init_batch` is the batch its learning-rate schedule was tuned for
    (the statistics' reference), `max_batch` the largest total batch it
    accepts, `min_local`/`max_local` the local (per-GPU) batch range that
    fits in memory. `fixed_batch` pins the total batch (a job that does
    not adapt its batch size).
    """

    init_batch: int
    max_batch: int
    min_local: int = 1
    max_local: int = 1 << 30
    fixed_batch: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.init_batch <= self.max_batch:
            raise ValueError(
                f"batch limits need 0 < init_batch <= max_batch, not "
                f"{self.init_batch} and {self.max_batch}"
            )
        if not 0 < self.min_local <= self.max_local:
            raise ValueError(
                f"batch limits need 0 < min_local <= max_local, not "
                f"{self.min_local} and {self.max_local}"
            )

    @property
    def max_replicas(self) -> int:
        """The most GPUs that each still get at least `min_local` samples."""
        if self.fixed_batch is not None:
            return max(1, self.fixed_batch // self.min_local)
        return max(1, self.max_batch // self.min_local)


@dataclass(frozen=True, slots=True)
class StepSample:
    """One measured step: where it ran, its local batch, and its times (seconds)."""

    nodes: int
    replicas: int
    atomic_bsz: int
    step_time: float  # a whole optimiser step, synchronisation included
    sync_time: float  # the part spent in gradient synchronisation

    @classmethod
    def of_step(
        cls, nodes: int, replicas: int, atomic: int, accum: int, step_time: float, sync: float
    ) -> StepSample:
        """A step of `accum + 1` micro-steps as the fit takes it: one micro-step plus the sync."""
        sync = min(sync, step_time)
        return cls(nodes, replicas, atomic, (step_time - sync) / (accum + 1) + sync, sync)


@dataclass(frozen=True, slots=True)
class ThroughputParams:
    """The fitted step-time model; see the module docstring for the formula."""

    alpha_c: float
    beta_c: float
    alpha_r: float = 0.0
    beta_r: float = 0.0
    alpha_n: float = 0.0
    beta_n: float = 0.0
    gamma: float = 1.0  # overlap of compute and network: 1 none, 10 nearly full

    def compute_time(self, atomic: float) -> float:
        return self.alpha_c + self.beta_c * atomic

    def network_time(self, nodes: int, replicas: int) -> float:
        if replicas <= 1:
            return 0.0
        extra = max(replicas - 2, 0)
        if nodes > 1:
            return self.alpha_n + self.beta_n * extra
        return self.alpha_r + self.beta_r * extra

    def step_time(self, nodes: int, replicas: int, atomic: float, accum: int) -> float:
        compute = self.compute_time(atomic)
        return compute * accum + optim_time(compute, self.network_time(nodes, replicas), self.gamma)


@dataclass(frozen=True, slots=True)
class JobGoodput:
    """What a host knows of one job's goodput, handed to policies with the snapshot.

    `samples` are the distinct step measurements so far (empty for a job
    never run), `grad_sqr`/`grad_var` its latest gradient statistics
    (None before any), `remaining` the progress still to make in the
    model's units (steps at the initial batch): from the total the job's
    spec declares, or from an estimate learned from jobs that already
    ended, never the job's own truth; None if neither is known.
    `restarts` is how many times it was (re)allocated after its first
    start and `progress` the steps at the initial batch made so far.
    `estimated`: `remaining` comes from a learned estimate, not a declared
    total (the host knows which it used).

    Every field is one a live job reports (`GoodputReport`) or the host
    counts; `of_report` is the one way both the live scheduler and the
    simulator build it.
    """

    limits: BatchLimits
    samples: tuple[StepSample, ...] = ()
    grad_sqr: float | None = None
    grad_var: float | None = None
    remaining: float | None = None
    restarts: int = 0
    progress: float = 0.0
    estimated: bool = False

    @classmethod
    def of_report(
        cls,
        report: GoodputReport,
        samples: tuple[StepSample, ...],
        restarts: int,
        estimate: float | None = None,
        fixed_batch: int | None = None,
    ) -> JobGoodput:
        """What the policy may know of a job: its latest report, its measured
        steps, its restart count and, for a job that declares no total, an
        estimate of its total progress learned from ended jobs (None: none).
        `fixed_batch` is the batch of a job whose spec pins it (it does not
        adapt; None: it does).

        A job past its estimate has no known remaining work (the estimate
        was wrong for it), rather than none left."""
        remaining = report.remaining()
        estimated = False
        if remaining is None and estimate is not None and estimate > report.progress:
            remaining = estimate - report.progress
            estimated = True
        limits = report.limits()
        if fixed_batch is not None:
            limits = replace(limits, fixed_batch=fixed_batch)
        return cls(
            limits,
            samples,
            report.grad_sqr,
            report.grad_var,
            remaining,
            restarts,
            report.progress,
            estimated,
        )

    def model(self) -> GoodputModel:
        """The fitted model (cached: equal inputs give the same object)."""
        return _model(self.limits, self.samples, noise_ratio(self.grad_sqr, self.grad_var))


def _finite(name: str, value: float | None, low: float = 0.0) -> None:
    if value is not None and not (math.isfinite(value) and value >= low):
        raise ValueError(f"goodput report: {name} must be a finite number >= {low:g}, not {value}")


@dataclass(frozen=True, slots=True)
class GoodputReport:
    """What a running job tells the scheduler about its goodput: declared once, here.

    The runtime (`schedulearn.runtime.AdaptiveBatch`) writes it with each
    progress report, the agent and the API carry it as
    `protocol.ProgressReport.goodput`, and the server turns it into a
    `JobGoodput` for the policy. Sizes are the job's batch limits and the
    configuration it runs now; `step_time` is its mean optimiser step
    there (all `accum_steps + 1` micro-steps, synchronisation included;
    None before the first step), `sync_time` the part spent
    synchronising gradients; `grad_sqr`/`grad_var` the smoothed gradient
    statistics (`grad_var` at `init_batch`; None before any estimate);
    `progress` the steps at the initial batch made so far (each step
    counted by its gain, as AdaScale does) and `target` where the job
    stops (None: unknown).
    """

    init_batch: int
    max_batch: int
    min_local_batch: int
    max_local_batch: int
    batch_size: int
    local_batch: int
    accum_steps: int = 0
    replicas: int = 1
    nodes: int = 1
    lr_scale: float = 1.0
    step_time: float | None = None
    sync_time: float = 0.0
    grad_sqr: float | None = None
    grad_var: float | None = None
    progress: float = 0.0
    target: float | None = None
    # Read by pydantic where the wire models carry it (a plain dict: core imports
    # no pydantic). Unknown keys are dropped, not refused: the runtime in a job's
    # environment may be newer than the agent or the client reading it.
    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "ignore"}

    def __post_init__(self) -> None:
        self.limits()  # refuses impossible limits, saying which
        for name in ("batch_size", "local_batch", "replicas", "nodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"goodput report: {name} must be 1 or more")
        if self.accum_steps < 0 or self.nodes > self.replicas:
            raise ValueError("goodput report: accum_steps >= 0 and nodes <= replicas, please")
        _finite("lr_scale", self.lr_scale)
        _finite("step_time", self.step_time)
        _finite("sync_time", self.sync_time)
        _finite("grad_sqr", self.grad_sqr, -math.inf)
        _finite("grad_var", self.grad_var)
        _finite("progress", self.progress)
        _finite("target", self.target)

    def limits(self) -> BatchLimits:
        return BatchLimits(
            self.init_batch, self.max_batch, self.min_local_batch, self.max_local_batch
        )

    def sample(self) -> StepSample | None:
        """The step measured here, as the fit takes it (one micro-step plus the sync)."""
        if self.step_time is None:
            return None
        return StepSample.of_step(
            self.nodes,
            self.replicas,
            self.local_batch,
            self.accum_steps,
            self.step_time,
            self.sync_time,
        )

    def remaining(self) -> float | None:
        """Progress still to make (steps at the initial batch), None when unknown."""
        return None if self.target is None else max(0.0, self.target - self.progress)


def fit_throughput(samples: tuple[StepSample, ...]) -> ThroughputParams:
    """Fit the step-time model to measured steps (at least one)."""
    if not samples:
        raise ValueError("fit_throughput needs at least one sample; use GoodputModel.prior")
    bszs = [float(s.atomic_bsz) for s in samples]
    computes = [max(s.step_time - s.sync_time, 1e-9) for s in samples]
    if len(set(bszs)) == 1:
        # Pollux's prior: half constant, half proportional to the batch.
        mean = sum(computes) / len(computes)
        alpha_c, beta_c = mean / 2, mean / 2 / bszs[0]
    else:
        alpha_c, beta_c = nonneg_line(bszs, computes)
        if alpha_c <= 0 and beta_c <= 0:
            mean = sum(computes) / len(computes)
            alpha_c, beta_c = mean / 2, mean / 2 / (sum(bszs) / len(bszs))
    # The network and its overlap with compute are fitted to the whole steps: the
    # exposed sync time alone shrinks as the compute grows (`core.goodput_fit`).
    points = tuple(
        NetPoint(s.nodes, s.replicas, alpha_c + beta_c * s.atomic_bsz, s.step_time)
        for s in samples
        if s.replicas > 1
    )
    alpha_r, beta_r, alpha_n, beta_n, gamma = fit_network(points)
    return ThroughputParams(alpha_c, beta_c, alpha_r, beta_r, alpha_n, beta_n, gamma)


@dataclass(frozen=True, slots=True)
class BatchChoice:
    """A batch configuration and its predicted goodput."""

    goodput: float  # progress per second (steps at the initial batch per second)
    batch: int  # total batch: replicas * atomic * (accum + 1)
    atomic: int
    accum: int


def batch_configs(limits: BatchLimits, replicas: int) -> tuple[tuple[int, int, int], ...]:
    """(total batch, atomic local batch, accumulation steps) a job may use on `replicas` GPUs.

    Total batches are spread geometrically from the smallest allowed to
    `max_batch`; a local batch above `max_local` is split into
    accumulation steps (at least one on a single GPU above the initial
    batch, as Pollux does, so the gradient noise can still be measured).
    """
    return _batch_configs(limits, replicas)


@lru_cache(maxsize=4096)
def _batch_configs(limits: BatchLimits, replicas: int) -> tuple[tuple[int, int, int], ...]:
    if replicas <= 0:
        return ()
    if limits.fixed_batch is not None:
        targets = [float(limits.fixed_batch)]
    else:
        lo = max(limits.init_batch, limits.min_local * replicas)
        hi = limits.max_batch
        if lo > hi:
            return ()
        k = BATCH_CANDIDATES
        targets = [lo * (hi / lo) ** (i / (k - 1)) for i in range(k)] if hi > lo else [lo]
    out: dict[tuple[int, int], int] = {}
    for target in targets:
        local = target / replicas
        accum = math.ceil(local / limits.max_local - 1e-8) - 1
        if replicas == 1 and local > limits.init_batch + 1e-8:
            accum = max(1, accum)
        accum = max(accum, 0)
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        atomic = min(atomic, limits.max_batch // (replicas * (accum + 1)) or 1)
        if not limits.min_local <= atomic <= limits.max_local:
            continue
        if limits.fixed_batch is None and replicas * atomic * (accum + 1) > limits.max_batch:
            # Rounding up to whole local batches overshot: fewer accumulation steps.
            accum = limits.max_batch // (replicas * atomic) - 1
            if accum < 0:
                continue
        batch = replicas * atomic * (accum + 1)
        out.setdefault((atomic, accum), batch)
    return tuple((b, a, c) for (a, c), b in out.items())


class GoodputModel:
    """Predicted goodput of one job for any allocation; immutable once built.

    The statistical efficiency depends on the gradient statistics only
    through their ratio `noise = var / sqr` (the gradient noise scale
    divided by the initial batch), which is what the model keeps.
    """

    __slots__ = ("_best", "limits", "noise", "params")

    def __init__(
        self,
        limits: BatchLimits,
        params: ThroughputParams | None,
        noise: float | None = None,
    ) -> None:
        self.limits = limits
        self.params = params
        self.noise = noise
        self._best: dict[tuple[int, int], BatchChoice | None] = {}

    @classmethod
    def prior(cls, limits: BatchLimits) -> GoodputModel:
        """A job never measured: linear speedup (relative units only)."""
        return cls(limits, None)

    @property
    def measured(self) -> bool:
        """Is the absolute speed known (at least one measured step)?"""
        return self.params is not None

    def gain(self, batch: float) -> float:
        """Progress of one step at `batch`, in steps at the initial batch (1.0 at it).

        Without gradient statistics a bigger batch is assumed to bring
        nothing (gain 1): the cautious choice until the job reports them.
        """
        scale = batch / self.limits.init_batch
        noise = self.noise
        if noise is None or scale <= 1.0:
            return 1.0 if scale >= 1.0 or noise is None else scale
        return (noise + 1.0) / (noise / scale + 1.0)

    def efficiency(self, batch: float) -> float:
        """Progress per sample at `batch` relative to the initial batch (1.0 at it)."""
        return self.gain(batch) * self.limits.init_batch / batch

    def goodput(self, nodes: int, replicas: int, atomic: int, accum: int) -> float:
        """Progress per second at one configuration (per unit time for the prior)."""
        batch = replicas * atomic * (accum + 1)
        if self.params is None:
            # Unknown speed: each GPU does one initial-batch step per unit time.
            return float(replicas) * self.gain(batch) * self.limits.init_batch / batch
        step = self.params.step_time(nodes, replicas, atomic, accum)
        return self.gain(batch) / step if step > 0 else 0.0

    def best(self, nodes: int, replicas: int) -> BatchChoice | None:
        """The batch that maximises goodput on `replicas` GPUs over `nodes` nodes."""
        key = (nodes, replicas)
        if key in self._best:
            return self._best[key]
        configs = batch_configs(self.limits, replicas)
        choice: BatchChoice | None = None
        params = self.params
        if not configs:
            pass
        elif params is None:
            b, a, c = min(configs)
            choice = BatchChoice(self.goodput(nodes, replicas, a, c), b, a, c)
        else:
            # The hot loop of the goodput policy: inlined step time and gain.
            net = params.network_time(nodes, replicas)
            alpha, beta, gamma = params.alpha_c, params.beta_c, params.gamma
            init = self.limits.init_batch
            noise = self.noise
            best_g = -1.0
            for b, a, c in configs:
                compute = alpha + beta * a
                if gamma == 1.0 or net <= 0.0:
                    step = compute * (c + 1) + net
                else:
                    step = compute * c + optim_time(compute, net, gamma)
                scale = b / init
                if noise is None or scale <= 1.0:
                    gain = 1.0 if scale >= 1.0 or noise is None else scale
                else:
                    gain = (noise + 1.0) / (noise / scale + 1.0)
                g = gain / step if step > 0 else 0.0
                if g > best_g:
                    best_g, choice = g, BatchChoice(g, b, a, c)
        self._best[key] = choice
        return choice

    def speed(self, nodes: int, replicas: int) -> float:
        """Best goodput on that allocation (0.0 for none or an impossible one)."""
        if replicas <= 0:
            return 0.0
        choice = self.best(nodes, replicas)
        return 0.0 if choice is None else choice.goodput


def noise_ratio(grad_sqr: float | None, grad_var: float | None) -> float | None:
    """`var / sqr`, rounded to 3% steps in log space so that models are shared.

    None when the statistics are missing; a vanishing `sqr` (pure noise)
    is capped at a ratio of 1e6.
    """
    if grad_sqr is None or grad_var is None or grad_var < 0:
        return None
    if grad_var == 0:
        return 0.0
    ratio = grad_var / grad_sqr if grad_sqr > 0 else 1e6
    ratio = min(max(ratio, 1e-6), 1e6)
    return math.exp(round(math.log(ratio) / NOISE_STEP) * NOISE_STEP)


@lru_cache(maxsize=8192)
def _model(
    limits: BatchLimits, samples: tuple[StepSample, ...], noise: float | None
) -> GoodputModel:
    params = fit_throughput(samples) if samples else None
    return GoodputModel(limits, params, noise)
