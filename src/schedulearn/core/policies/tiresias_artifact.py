"""Tiresias as Pollux's artifact runs it (`tiresias:mode=artifact`), for like-for-like comparisons.

Pollux's evaluation (OSDI'21; petuum/adaptdl, branch `osdi21-artifact`,
`simulator/tiresias.py`) compares against a Tiresias of its own whose
rules differ from our default `tiresias` (Gu et al.'s discretized 2D-LAS
as `core.policies.tiresias` documents it). Re-implemented from reading
that file, one pass (the artifact decides every 60 s and computes time
by its own rules: run it with `simulate --round 60 --artifact-time`):

1. Two queues. A job enters queue 0 when first seen; queue 0 is in that
   order (submission time, then id). A job moves to the end of queue 1
   at the first pass that sees its GPU-seconds of run time (counted from
   each start, restart time included) at or past the threshold (16
   GPU-hours); queue 1 is in that order. No starvation guard.
2. Walk queue 0 then queue 1 with the cluster's healthy GPU *count*: a
   job (running or waiting) whose GPUs fit in what is left runs, else it
   waits; a job that does not fit does not stop later ones. Nothing
   else: every running job that the walk leaves out is preempted, also
   one of the same queue (a waiting job ahead of it in its queue takes
   its GPUs); no packing, no fragmentation check.
3. Jobs chosen to run that are not running yet get GPUs in queue order,
   each from the node with the most free GPUs first (the first such node
   in cluster order among equals), as many as that node has, until the
   job has all it asked for.

Where ours must differ: the artifact's count never fails to place a job
(its cluster is homogeneous GPUs only); here a job whose most-free
placement breaks a rule every policy keeps (GPU type, capabilities,
CPUs, memory) is placed as `FreePool.pack` would, or waits. A
non-preemptible running job is never preempted: its GPUs are counted
first. The order of queue 1 is the one piece of history a snapshot does
not hold; the policy records when it first saw each job there
(`Demotions`), and a rebuilt policy falls back to the order in which
the running jobs crossed the threshold (see `Demotions.key`).
"""

from __future__ import annotations

from collections.abc import Sequence

from schedulearn.core.decisions import Decision, Preempt, Start
from schedulearn.core.placement import FreePool
from schedulearn.core.views import ClusterView, JobView, NodeView, Placement

_EPS = 1e-9


class Demotions:
    """When each job was first seen in queue 1, (time, id): queue 1's order.

    Kept by the policy object between passes (the only history this mode
    needs); entries of jobs no longer in the snapshot are dropped.
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[int, float] = {}

    def key(self, job: JobView, now: float, threshold: float) -> tuple[float, int]:
        seen = self._seen.get(job.id)
        if seen is None:
            # Not seen before in queue 1: demoted at this pass. A policy
            # rebuilt mid-run has no record; the crossing time of the
            # current run is then the best estimate (earlier runs: now).
            seen = now
            if job.placement is not None and job.started_at is not None:
                before = job.attained_gpu_seconds
                if before < threshold:
                    seen = job.started_at + (threshold - before) / max(1, job.allocated_gpus)
            self._seen[job.id] = seen
        return (seen, job.id)

    def forget_all_but(self, ids: set[int]) -> None:
        for gone in [i for i in self._seen if i not in ids]:
            del self._seen[gone]


def artifact_pass(view: ClusterView, threshold: float, demotions: Demotions) -> list[Decision]:
    """One pass of the artifact's rules (module doc)."""
    now = view.now
    jobs = (*view.running, *view.pending)
    if not view.pending:
        return []
    demotions.forget_all_but({j.id for j in jobs})
    q0: list[tuple[float, int, JobView]] = []
    q1: list[tuple[tuple[float, int], JobView]] = []
    for j in jobs:
        if j.attained_at(now) + _EPS >= threshold:
            q1.append((demotions.key(j, now, threshold), j))
        else:
            q0.append((j.submitted_at, j.id, j))
    q0.sort(key=lambda t: t[:2])
    q1.sort(key=lambda t: t[0])
    ordered = [t[2] for t in q0] + [t[1] for t in q1]

    left = sum(n.num_gpus for n in view.nodes if n.healthy)
    # Non-preemptible running jobs keep their GPUs whatever the order.
    pinned = {j.id for j in view.running if not j.preemptible}
    left -= sum(j.allocated_gpus for j in view.running if j.id in pinned)
    chosen: set[int] = set(pinned)
    for j in ordered:
        if j.id in pinned:
            continue
        need = j.allocated_gpus if j.placement is not None else j.gpus
        if need <= left:
            chosen.add(j.id)
            left -= need

    pool = FreePool(view)
    decisions: list[Decision] = []
    for j in view.running:
        if j.id not in chosen:
            pool.release(j)
            decisions.append(Preempt(j.id))
    for j in ordered:
        if j.placement is not None or j.id not in chosen:
            continue
        placement = most_free_first(pool, j) or pool.pack(j)
        if placement is None:
            continue  # a rule the artifact does not have (types, capabilities) keeps it out
        pool.take(j, placement)
        decisions.append(Start(j.id, placement))
    return decisions


def most_free_first(pool: FreePool, job: JobView) -> Placement | None:
    """The job's GPUs from the node with the most free GPUs first (cluster order among
    equals), as the artifact allocates; None if that breaks a placement rule."""
    need = job.gpus
    if need <= 0:
        return None  # a CPU-only job: the pool's own rule places it
    usable: Sequence[NodeView] = [
        n
        for n in pool.nodes
        if n.healthy
        and pool.num_free(n) > 0
        and not (job.gpu_type and need and n.gpu_type != job.gpu_type)
        and pool.runnable(job, n)
    ]
    if sum(pool.num_free(n) for n in usable) < need:
        return None
    # Stable sort: among equal free counts, cluster order (the artifact's Counter order).
    ranked = sorted(usable, key=lambda n: -pool.num_free(n))
    parts: dict[str, list[int]] = {}
    left = need
    for node in ranked:
        if left <= 0:
            break
        take = min(left, pool.num_free(node))
        parts[node.name] = list(pool.free_gpus(node)[:take])
        left -= take
    placement = Placement.of(parts)
    if len(parts) == 1:
        (name,) = parts
        node = next(n for n in usable if n.name == name)
        return placement if pool.fits(node, job, need) else None
    by_name = {n.name: n for n in usable}
    for name, held in placement:
        cpus, mem = job.demand_on(placement, len(held))
        if not pool._fits_rest(by_name[name], cpus, mem):
            return None
    return placement
