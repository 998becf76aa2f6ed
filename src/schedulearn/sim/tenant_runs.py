"""Run policies with tenant queues, and each queue alone, for the fairness report.

For each policy spec: one shared run of the workload under
`FairShare(policy)` with the queues in the view (or, with
`queues=False`, the plain policy on the same workload, the no-queue
baseline), plus one run per queue of its jobs alone under the plain
policy on a cluster of its guaranteed size (`tenants.alone_cluster`).
Runs are independent, so they go to a process pool; results come back
in a fixed order.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from collections.abc import Sequence
from dataclasses import dataclass

from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Tenancy
from schedulearn.core.registry import create
from schedulearn.sim.cluster import ClusterSpec
from schedulearn.sim.engine import Simulator
from schedulearn.sim.jobs import SimInputError, Workload
from schedulearn.sim.results import SimResult
from schedulearn.sim.runner import SpeedOptions, check_policies
from schedulearn.sim.tenants import Fairness, alone_cluster, fairness, queue_workload, tenancy_for


@dataclass(frozen=True, slots=True)
class TenantRun:
    """One policy's shared run (with or without queues) and its fairness figures."""

    spec: str
    queues: bool
    shared: SimResult
    fairness: Fairness


@dataclass(frozen=True, slots=True)
class _Task:
    workload: Workload
    cluster: ClusterSpec
    spec: str
    tenancy: Tenancy | None
    speed: SpeedOptions
    min_run: float


def _run(task: _Task) -> SimResult:
    policy = create(task.spec)
    label = task.spec
    if task.tenancy is not None:
        policy = FairShare(policy, min_run=task.min_run)
        label = f"{task.spec}+queues"
    model = task.speed.build([task.workload])
    sim = Simulator(
        task.workload,
        task.cluster,
        policy,
        model,
        record_segments=False,
        policy_name=label,
        tenancy=task.tenancy,
    )
    return sim.run()


def run_tenants(
    workload: Workload,
    cluster: ClusterSpec,
    specs: Sequence[str],
    tenancy: Tenancy,
    speed: SpeedOptions | None = None,
    with_queues: Sequence[bool] = (True,),
    min_run: float = 300.0,
    processes: int | None = None,
) -> list[TenantRun]:
    """Shared runs (for each spec and each of `with_queues`) and the alone runs, in parallel."""
    specs = check_policies(specs)
    speed = speed or SpeedOptions()
    queues = sorted({j.queue for j in workload.jobs})
    tasks: list[_Task] = []
    # What each task is: (spec, with queues) for a shared run, (spec, queue) alone.
    kinds: list[tuple[str, bool | str]] = []
    for spec in specs:
        for on in with_queues:
            tasks.append(_Task(workload, cluster, spec, tenancy if on else None, speed, min_run))
            kinds.append((spec, on))
        for q in queues:
            # A queue guaranteed 0 GPUs has no alone run; jobs larger than
            # the guarantee are left out of it (`tenants.fairness` says so).
            shape = alone_cluster(tenancy.queue(q), cluster)
            if shape is None:
                continue
            own = queue_workload(workload, q, shape.total_gpus)
            if len(own):
                tasks.append(_Task(own, shape, spec, None, speed, min_run))
                kinds.append((spec, q))
    workers = min(len(tasks), processes or os.cpu_count() or 1)
    if workers <= 1:
        results = [_run(t) for t in tasks]
    else:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            # Largest runs first, so that a long shared run does not start last.
            order = sorted(range(len(tasks)), key=lambda i: -len(tasks[i].workload))
            done = pool.map(_run, [tasks[i] for i in order], chunksize=1)
            results = [r for _, r in sorted(zip(order, done, strict=True))]
    alone: dict[str, dict[str, SimResult]] = {spec: {} for spec in specs}
    for (spec, what), res in zip(kinds, results, strict=True):
        if isinstance(what, str):
            alone[spec][what] = res
    out: list[TenantRun] = []
    for (spec, what), res in zip(kinds, results, strict=True):
        if isinstance(what, bool):
            out.append(TenantRun(spec, what, res, fairness(res, alone[spec], tenancy)))
    return out


def simulate_tenants(
    workload: Workload,
    cluster: ClusterSpec,
    specs: Sequence[str],
    tenants: str,
    speed: SpeedOptions | None = None,
    min_run: float = 300.0,
    half_life: float | None = None,
    processes: int | None = None,
) -> list[TenantRun]:
    """`simulate --tenants`: queues from `tenants` (`philly` or a queue file), each
    policy's shared run with them, and its fairness against each queue alone.

    `half_life` (seconds; 0: usage never decays) replaces the queues' own
    (a week for `philly`, the file's `half_life` otherwise) when given.
    """
    if not min_run >= 0:
        raise SimInputError(f"--min-run must be 0 or more seconds, not {min_run}")
    if half_life is not None and not half_life >= 0:
        raise SimInputError(
            f"--half-life must be positive seconds (0: usage never decays), not {half_life}"
        )
    tenancy = tenancy_for(tenants, workload, cluster.total_gpus)
    if half_life is not None:
        tenancy = dataclasses.replace(tenancy, half_life=half_life or None)
    return run_tenants(
        workload, cluster, specs, tenancy, speed, (True,), min_run=min_run, processes=processes
    )
