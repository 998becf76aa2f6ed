"""Adaptive jobs: trace jobs that run on any GPU count and pick their own batch size.

In a Pollux workload each job asks for a fixed GPU count and batch size.
Pollux's own evaluation lets its jobs adapt both (AdaptDL); this module
turns such a workload into that form, following the artifact's
simulator (petuum/adaptdl, `osdi21-artifact`, `simulator/simulator.py`):

- a job runs on 1 to `cap` GPUs (default 64, Pollux's limit), and never
  on more than its application's largest batch spread at the smallest
  measured local batch allows (`BatchLimits.max_replicas`);
- its batch size is left unset: the measured speed model then has it
  pick the best batch for its placement at every epoch
  (`schedulearn.sim.measured`);
- ncf jobs keep their batch (32,768) and one GPU, as in the artifact.

The requested GPU count stays the job's `gpus` (clamped to the range),
so a policy that ignores elasticity starts it at its requested size.
"""

from __future__ import annotations

from dataclasses import replace

from schedulearn.sim.jobs import SimInputError, Workload
from schedulearn.sim.measured import MeasuredSpeed

DEFAULT_CAP = 64
# Applications Pollux's simulator keeps at a fixed size and batch: name -> most GPUs.
FIXED = {"ncf": 1}


def make_adaptive(workload: Workload, speed: MeasuredSpeed, cap: int = DEFAULT_CAP) -> Workload:
    """The workload with every job that names a measured application made adaptive."""
    if cap < 1:
        raise SimInputError(f"the adaptive GPU cap must be 1 or more, not {cap}")
    jobs = []
    for job in workload.jobs:
        tables = speed.tables_of(job) if job.app else None
        if tables is None:
            jobs.append(job)
            continue
        if job.app in FIXED:
            most = FIXED[job.app]
            batch: int | None = job.batch_size
        else:
            most = min(cap, tables.limits().max_replicas)
            batch = None
        jobs.append(
            replace(job, gpus=min(job.gpus, most), min_gpus=1, max_gpus=most, batch_size=batch)
        )
    params = {**workload.params, "adaptive": str(cap)}
    return replace(workload, jobs=tuple(jobs), params=params)


def is_adaptive(workload: Workload) -> bool:
    """Was the workload asked to be made adaptive (`adaptive=true` in its spec)?"""
    return "adaptive" in workload.params
