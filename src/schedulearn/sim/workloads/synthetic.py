"""Generated workloads: Poisson arrivals, uniform arrivals, and the original Schedulearn bursts.

Every generator takes a seed (`random.Random(seed)`), so a spec and a
seed always give the same jobs. Generated jobs are preemptible.

`poisson:n=100:rate=0.01` and `uniform:n=100:window=3600` share the
job-shape options:
  gpus=1,2,4,8      sizes to draw from; weights=... their weights (default equal)
  duration=3600     mean run time in seconds at the requested size
  dist=exponential  exponential | lognormal (sigma 1) | fixed
  deadline=0        if > 0, each job's deadline is submit + deadline x duration
  elastic=false     if true, a job of g GPUs may run on max(1, g/2)..2g GPUs

`bursts:5,10,15,20` is the experiment of the original Schedulearn thesis
(section 5.4): on 3 servers of 4 GPUs, N jobs are submitted at once
every `every=10` seconds, `rounds=4` times (the thesis does not give the
count; we fix it), one workload per N. Each job picks a model and a GPU
count (1-4) at random; its duration is the thesis's measured training
time of that model on that many GPUs (section 5.2).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from schedulearn.sim.jobs import SimInputError, SimJob, Workload
from schedulearn.sim.workloads.options import Options

# Seconds to train each MNIST model on 1, 2, 3, 4 GPUs, measured on GTX 1080 Ti
# servers (thesis section 5.2), plus the PyTorch ResNet of section 5.4.3.
THESIS_MODELS: dict[str, tuple[float, float, float, float]] = {
    "tf-keras-mnist": (107.0, 69.0, 52.3, 45.0),
    "tf-mnist": (67.0, 51.0, 42.0, 37.0),
    "pytorch-mnist": (157.0, 89.0, 66.0, 54.0),
    "mxnet-mnist": (28.6, 24.3, 22.2, 21.5),
    "pytorch-resnet": (312.9, 250.4, 216.2, 194.6),
}
MNIST_MODELS = ("tf-keras-mnist", "tf-mnist", "pytorch-mnist", "mxnet-mnist")


@dataclass(frozen=True, slots=True)
class _Shape:
    """The job-shape options of poisson and uniform workloads."""

    gpus: list[int]
    weights: list[float]
    duration: float
    dist: str
    deadline: float
    elastic: bool


def _shape_options(opts: Options) -> _Shape:
    gpus = [int(g) for g in opts.numbers("gpus", [1, 2, 4, 8])]
    weights = opts.numbers("weights", [1.0] * len(gpus))
    if len(weights) != len(gpus) or any(g < 0 for g in gpus) or any(w < 0 for w in weights):
        raise SimInputError(
            f"{opts.kind}: gpus and weights need the same number of non-negative values"
        )
    dist = opts.text("dist", "exponential")
    if dist not in ("exponential", "lognormal", "fixed"):
        raise SimInputError(
            f"{opts.kind}: dist must be exponential, lognormal or fixed, not {dist!r}"
        )
    return _Shape(
        gpus,
        weights,
        opts.number("duration", 3600.0, low=1.0),
        dist,
        opts.number("deadline", 0.0, low=0.0),
        opts.flag("elastic", False),
    )


def _draw_duration(rng: random.Random, mean: float, dist: str) -> float:
    if dist == "fixed":
        return mean
    if dist == "lognormal":
        sigma = 1.0
        # exp(mu + sigma^2 / 2) = mean
        return max(1.0, rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma))
    return max(1.0, rng.expovariate(1.0 / mean))


def _jobs(times: list[float], shape: _Shape, rng: random.Random, prefix: str) -> tuple[SimJob, ...]:
    slack, elastic = shape.deadline, shape.elastic
    jobs = []
    for i, t in enumerate(times):
        g = rng.choices(shape.gpus, shape.weights)[0]
        duration = _draw_duration(rng, shape.duration, shape.dist)
        jobs.append(
            SimJob(
                id=i,
                submitted_at=round(t, 3),
                gpus=g,
                duration=round(duration, 3),
                name=f"{prefix}-{i}",
                min_gpus=max(1, g // 2) if elastic and g else None,
                max_gpus=2 * g if elastic and g else None,
                deadline=round(t + slack * duration, 3) if slack > 0 else None,
            )
        )
    return tuple(jobs)


def poisson(opts: Options, seed: int) -> Workload:
    n = opts.integer("n", 100, low=1)
    rate = opts.number("rate", 0.01)
    if rate <= 0:
        raise SimInputError("poisson: rate must be positive (jobs per second), e.g. rate=0.01")
    seed = opts.integer("seed", seed)
    shape = _shape_options(opts)
    opts.finish()
    rng = random.Random(seed)
    times, t = [], 0.0
    for _ in range(n):
        times.append(t)
        t += rng.expovariate(rate)
    jobs = _jobs(times, shape, rng, "poisson")
    return Workload(
        f"poisson-{n}",
        jobs,
        f"{n} jobs, Poisson arrivals at {rate:g}/s",
        "poisson",
        {"n": str(n), "rate": f"{rate:g}", "seed": str(seed)},
    )


def uniform(opts: Options, seed: int) -> Workload:
    n = opts.integer("n", 100, low=1)
    window = opts.number("window", 3600.0, low=0.0)
    seed = opts.integer("seed", seed)
    shape = _shape_options(opts)
    opts.finish()
    rng = random.Random(seed)
    times = sorted(rng.uniform(0.0, window) for _ in range(n))
    jobs = _jobs(times, shape, rng, "uniform")
    return Workload(
        f"uniform-{n}",
        jobs,
        f"{n} jobs, arrivals uniform over {window:g} s",
        "uniform",
        {"n": str(n), "window": f"{window:g}", "seed": str(seed)},
    )


def bursts(opts: Options, seed: int) -> list[Workload]:
    sizes = [int(s) for s in opts.positional[0].split(",")] if opts.positional else []
    if not sizes:
        sizes = [opts.integer("n", 5, low=1)]
    every = opts.number("every", 10.0, low=0.0)
    rounds = opts.integer("rounds", 4, low=1)
    model = opts.text("model", "mnist")
    max_gpus = opts.integer("max_gpus", 4, low=1)
    seed = opts.integer("seed", seed)
    opts.finish(positional_ok=True)
    if any(s <= 0 for s in sizes):
        raise SimInputError("bursts: sizes must be positive, e.g. bursts:5,10,15,20")
    if model == "mnist":
        models: tuple[str, ...] = MNIST_MODELS
    elif model in THESIS_MODELS:
        models = (model,)
    else:
        raise SimInputError(
            f"bursts: unknown model {model!r}; use mnist (a mix) or one of: "
            + ", ".join(THESIS_MODELS)
        )
    out = []
    for size in sizes:
        rng = random.Random(f"{seed}:{size}")
        jobs = []
        for r in range(rounds):
            for k in range(size):
                name = rng.choice(models)
                g = rng.randint(1, min(max_gpus, 4))
                i = r * size + k
                jobs.append(
                    SimJob(
                        id=i,
                        submitted_at=r * every,
                        gpus=g,
                        duration=THESIS_MODELS[name][g - 1],
                        name=f"{name}-{i}",
                        model=name,
                    )
                )
        out.append(
            Workload(
                f"bursts-{size}",
                tuple(jobs),
                f"{size} jobs every {every:g} s, {rounds} times (thesis models: {model})",
                "bursts",
                {
                    "size": str(size),
                    "every": f"{every:g}",
                    "rounds": str(rounds),
                    "seed": str(seed),
                },
                default_cluster="3x4",
            )
        )
    return out
