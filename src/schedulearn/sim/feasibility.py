"""Refuse, before a run, jobs that could never start on the cluster even when it is empty.

Without this check such a job would wait forever and the run would end
with it unfinished, or a time-driven policy would tick on an idle
cluster. The check is necessary, not sufficient: a gang's CPU and
memory split across nodes is only checked in total.
"""

from __future__ import annotations

from schedulearn.core.capabilities import can_run
from schedulearn.sim.cluster import ClusterSpec
from schedulearn.sim.jobs import SimInputError, SimJob, Workload


def why_unfit(job: SimJob, cluster: ClusterSpec) -> str | None:
    """Why `job` can never run on `cluster`, or None if it can."""
    # The requested size, not an elastic job's minimum: policies that do not
    # resize give a job exactly what it asked for.
    need = job.gpus
    # The one feasibility rule (labels, GPU type), as the policies and the ledger apply it.
    view = job.view(None)
    nodes = [n for n in cluster.nodes if n.healthy and can_run(view, n)]
    if job.constraints and not nodes:
        present = sorted({label for n in cluster.nodes for label in n.capabilities.labels})
        return (
            f"needs label {', '.join(job.constraints)}, which no node has together "
            f"(labels present: {', '.join(present) or 'none'}); give nodes labels in "
            f"--cluster, e.g. 2x8:label={job.constraints[0]}"
        )
    kind = f"{job.gpu_type} " if job.gpu_type else ""
    capacity = sum(n.num_gpus for n in nodes)
    if need > capacity:
        return f"asks for {need} {kind}GPUs; the cluster has {capacity}"
    largest = max((n.num_gpus for n in nodes), default=0)
    if need <= largest:
        fits = [
            n
            for n in nodes
            if n.num_gpus >= need
            and n.cpus + 1e-9 >= job.cpus
            and n.memory_gb + 1e-9 >= job.memory_gb
        ]
        if not fits:
            return (
                f"asks for {need} GPUs, {job.cpus:g} CPUs and {job.memory_gb:g} GB on one node; "
                "no node has that much"
            )
    elif job.cpus > sum(n.cpus for n in nodes) or job.memory_gb > sum(n.memory_gb for n in nodes):
        return f"asks for {job.cpus:g} CPUs and {job.memory_gb:g} GB; the cluster has less"
    return None


def check_feasible(workload: Workload, cluster: ClusterSpec) -> None:
    """Raise `SimInputError` naming the first job that can never start, and how many."""
    bad: list[tuple[SimJob, str]] = []
    # Jobs of one shape share the answer; a trace has few shapes and many jobs.
    seen: dict[tuple[object, ...], str | None] = {}
    for job in workload.jobs:
        key = (
            job.gpus,
            job.min_gpus,
            job.gpu_type,
            job.cpus,
            job.memory_gb,
            job.image,
            job.constraints,
        )
        if key not in seen:
            seen[key] = why_unfit(job, cluster)
        reason = seen[key]
        if reason is not None:
            bad.append((job, reason))
    if bad:
        job, reason = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise SimInputError(
            f"job {job.name or job.id} {reason}{more}; use a bigger --cluster "
            f"than {cluster.name!r} or drop those jobs"
        )
