"""The Tetris packing experiment: 40 jobs of 30 tasks with mixed GPU, CPU and memory demands.

After the setup of the University of Virginia report on re-implementing
Tetris (Brian Yu, 2021; `../shared/seeds/tetris-gandiva-report.txt`):
40 jobs, each of 30 tasks, arrive at uniformly random times during the
first 3,000 s on 20 nodes. The report publishes a makespan of 5,519 s
for Tetris and 7,083 s for FIFO, but not the demand distribution; ours
follows the Tetris paper's premise (Grandl et al., SIGCOMM 2014) that
tasks differ in which resource they stress:

- a job is GPU-heavy, CPU-heavy or memory-heavy (one third each);
- all of its tasks share its demand vector (as the tasks of one stage
  do), drawn once per job:
    GPU-heavy:    2-4 GPUs,  2-8 CPUs,   8-32 GB
    CPU-heavy:    0-1 GPU,  12-24 CPUs,  8-32 GB
    memory-heavy: 0-1 GPU,   2-8 CPUs,  48-96 GB
- a task runs for the job's base duration (uniform 80-250 s) times a
  per-task jitter of 0.8-1.2. We chose this range so that FIFO's
  makespan lands near the report's 7,083 s (6,600-7,800 s over seeds
  0-4 on the default cluster).

Nodes (the default cluster `20x4:cpus=32:mem=128`) have 4 GPUs, 32 CPUs
and 128 GB, so a node fits two CPU-heavy or two memory-heavy tasks, but
a CPU-heavy and a memory-heavy task pack together with a GPU-heavy
one, which is the room Tetris's alignment score finds and first-fit
FIFO does not. Tasks of a job share `group`; metrics count the job.
Every option can be changed: `tetris:jobs=40:tasks=30:window=3000`.
"""

from __future__ import annotations

import random

from schedulearn.sim.jobs import SimJob, Workload
from schedulearn.sim.workloads.options import Options

DEFAULT_CLUSTER = "20x4:cpus=32:mem=128"
# kind -> (GPU choices, CPU range, memory range in GB)
PROFILES: dict[str, tuple[tuple[int, ...], tuple[float, float], tuple[float, float]]] = {
    "gpu": ((2, 3, 4), (2.0, 8.0), (8.0, 32.0)),
    "cpu": ((0, 1), (12.0, 24.0), (8.0, 32.0)),
    "memory": ((0, 1), (2.0, 8.0), (48.0, 96.0)),
}


def tetris(opts: Options, seed: int) -> Workload:
    n_jobs = opts.integer("jobs", 40, low=1)
    tasks = opts.integer("tasks", 30, low=1)
    window = opts.number("window", 3000.0, low=0.0)
    low = opts.number("min_duration", 80.0, low=1.0)
    high = opts.number("max_duration", 250.0, low=low)
    seed = opts.integer("seed", seed)
    opts.finish()
    rng = random.Random(seed)
    kinds = sorted(PROFILES)
    jobs: list[SimJob] = []
    for j in range(n_jobs):
        submit = round(rng.uniform(0.0, window), 3)
        kind = rng.choice(kinds)
        gpu_choices, (c_lo, c_hi), (m_lo, m_hi) = PROFILES[kind]
        gpus = rng.choice(gpu_choices)
        cpus = float(rng.randint(int(c_lo), int(c_hi)))
        mem = float(round(rng.uniform(m_lo, m_hi)))
        base = rng.uniform(low, high)
        for t in range(tasks):
            jobs.append(
                SimJob(
                    id=j * tasks + t,
                    submitted_at=submit,
                    gpus=gpus,
                    duration=round(base * rng.uniform(0.8, 1.2), 3),
                    name=f"job{j}-task{t}",
                    group=f"job{j}",
                    cpus=cpus,
                    memory_gb=mem,
                    model=kind,
                )
            )
    return Workload(
        "tetris",
        tuple(jobs),
        f"{n_jobs} jobs x {tasks} tasks (GPU-, CPU- or memory-heavy), arrivals uniform over "
        f"{window:g} s",
        "tetris",
        {"jobs": str(n_jobs), "tasks": str(tasks), "window": f"{window:g}", "seed": str(seed)},
        default_cluster=DEFAULT_CLUSTER,
    )
