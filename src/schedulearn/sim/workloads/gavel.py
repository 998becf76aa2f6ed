"""The Gavel workload: jobs of Gavel's 26 model/batch-size combinations on a mixed cluster.

`gavel[:n=300][:rate=2][:arrivals=poisson|static][:seed=S][:multi_gpu=true]`
follows the job generator of Gavel's simulator (Narayanan et al., OSDI
2020, `scheduler/utils.py`, which samples Philly-like jobs):

- arrivals: Poisson, `rate` jobs per hour (default 2), as in Gavel's
  continuous-trace experiments (which report average JCT); or, with
  `arrivals=static`, all `n` jobs submitted at time 0, as in Gavel's
  static-trace makespan experiments (a fixed batch: when does the last
  one end?); `rate` does not apply there;
- size: 1 GPU (70%), 2 (10%), 4 (15%) or 8 (5%) — Gavel's multi-GPU
  distribution for large-batch distributed training; with
  `multi_gpu=false` every job takes 1 GPU;
- model: uniform over the combinations measured at that size (all 26
  at 1 GPU; ResNet-18, ResNet-50, Transformer and LM at 2, 4 and 8);
- duration: its run time on V100s at its size, 10^U(1.5, 3) minutes
  with probability 0.8 and 10^U(3, 4) minutes otherwise (about 30
  minutes to 17 hours, and 17 hours to a week), as Gavel draws it.

The jobs carry their model names ("ResNet-50 (batch size 64)"), and the
simulator runs them with `GavelSpeed` (measured steps/s per GPU type).
The default cluster is Gavel's simulated one, 36 K80 + 36 P100 + 36
V100 with one GPU per server (Gavel's `--num_gpus_per_server 1:1:1`),
so a multi-GPU job always spans servers and runs at Gavel's
"unconsolidated" throughput.
"""

from __future__ import annotations

import random

from schedulearn.core.gavel_profiles import ROWS
from schedulearn.sim.jobs import SimInputError, SimJob, Workload
from schedulearn.sim.workloads.options import Options

GAVEL_CLUSTER = "36x1:k80+36x1:p100+36x1:v100"
SIZES = (1, 2, 4, 8)
SIZE_WEIGHTS = (0.70, 0.10, 0.15, 0.05)
ARRIVALS = ("poisson", "static")


def models_at(gpus: int) -> list[str]:
    """The model/batch-size combinations Gavel measured at `gpus` GPUs, in table order."""
    return list(dict.fromkeys(model for model, count, _spread, *_ in ROWS if count == gpus))


def gavel_duration(rng: random.Random) -> float:
    """Seconds on V100s: Gavel's Philly-derived run-time distribution."""
    if rng.random() >= 0.8:
        return 60.0 * 10 ** rng.uniform(3.0, 4.0)
    return 60.0 * 10 ** rng.uniform(1.5, 3.0)


def gavel(opts: Options, seed: int) -> Workload:
    n = opts.integer("n", 300, low=1)
    arrivals = opts.text("arrivals", "poisson").lower()
    if arrivals not in ARRIVALS:
        raise SimInputError(
            f"gavel: arrivals={arrivals!r} is not known; use arrivals=poisson "
            "(continuous, at `rate` per hour) or arrivals=static (all jobs at time 0)"
        )
    static = arrivals == "static"
    rate = opts.number("rate", 2.0)
    if rate <= 0:
        raise SimInputError(
            "gavel: rate must be positive (jobs per hour), e.g. rate=2; "
            "for a batch all submitted at time 0 use arrivals=static"
        )
    seed = opts.integer("seed", seed)
    multi_gpu = opts.flag("multi_gpu", True)
    opts.finish()
    rng = random.Random(seed)
    catalogue = {g: models_at(g) for g in SIZES}
    jobs, t = [], 0.0
    for i in range(n):
        gpus = rng.choices(SIZES, SIZE_WEIGHTS)[0] if multi_gpu else 1
        model = rng.choice(catalogue[gpus])
        duration = gavel_duration(rng)
        jobs.append(
            SimJob(
                id=i,
                submitted_at=round(t, 3),
                gpus=gpus,
                duration=round(duration, 3),
                name=f"gavel-{i}",
                model=model,
            )
        )
        # The gap is drawn in both modes, so a seed gives the same jobs either way.
        gap = rng.expovariate(rate / 3600.0)
        t += 0.0 if static else gap
    params = {"n": str(n), "arrivals": arrivals, "seed": str(seed), "multi_gpu": str(multi_gpu)}
    if not static:
        params["rate"] = f"{rate:g}"
    return Workload(
        f"gavel-{n}" + ("-static" if static else ""),
        tuple(jobs),
        f"{n} jobs of Gavel's models, "
        + ("all submitted at time 0" if static else f"Poisson arrivals at {rate:g}/h")
        + ("" if multi_gpu else ", 1 GPU each"),
        "gavel",
        params,
        default_cluster=GAVEL_CLUSTER,
    )
