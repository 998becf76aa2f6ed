"""Making room for a waiting job by preempting running ones.

Every preempting policy (srtf, edf, tiresias, timeslice) has the same
problem: given the jobs it is willing to suspend, most preferred first,
find the fewest of them whose GPUs let the waiting job start. This
module is the one copy of that loop. It owns no state: it works on the
caller's `FreePool` and either leaves it exactly as it found it (no room)
or with the victims' GPUs released and the waiting job's GPUs taken.

Not a policy: the leading underscore keeps the package loader from
importing it as one.
"""

from __future__ import annotations

from collections.abc import Iterable

from schedulearn.core.placement import FreePool
from schedulearn.core.views import JobView, NodeView, Placement


def make_room(
    pool: FreePool,
    job: JobView,
    victims: Iterable[JobView],
    free: int,
    gpus: int | None = None,
) -> tuple[Placement, list[JobView]] | None:
    """Suspend victims, in the given order, until `job` fits; keep only those needed.

    `free` is the number of GPUs the pool has free now (the caller keeps
    the count, so no pass re-sums the cluster). Victims that are not
    preemptible or not running are skipped: a non-preemptible job is
    never suspended. On success the pool holds the job's placement and
    the needed victims' GPUs are free; the victims actually needed are
    returned in order. On failure the pool is unchanged.
    """
    n = job.gpus if gpus is None else gpus
    released: list[JobView] = []
    placement: Placement | None = None
    gained = 0
    for victim in victims:
        if not victim.preemptible or victim.placement is None:
            continue
        pool.release(victim)
        released.append(victim)
        gained += victim.placement.num_gpus
        # A placement needs at least n free GPUs in all; skip the search until then.
        if free + gained < n:
            continue
        placement = pool.pack(job, n)
        if placement is not None:
            break
    if placement is None:
        for victim in reversed(released):
            assert victim.placement is not None
            pool.take(victim, victim.placement)
        return None
    pool.take(job, placement)
    # Victims released early may have freed GPUs the placement did not
    # use (another node, another GPU type): let those keep running. Try
    # the least preferred first so the policy's preference order holds.
    needed: list[JobView] = []
    for victim in reversed(released):
        assert victim.placement is not None
        if can_retake(pool, victim, victim.placement):
            pool.take(victim, victim.placement)
        else:
            needed.append(victim)
    needed.reverse()
    return placement, needed


def can_retake(pool: FreePool, job: JobView, placement: Placement) -> bool:
    """Are all of `placement`'s GPUs, CPUs and memory free in `pool` now, on
    nodes that can run `job` (a swap may offer it another job's nodes)?"""
    by_name = {node.name: node for node in pool.nodes} if placement.num_nodes > 1 else None
    for name, gpus in placement:
        node = by_name[name] if by_name is not None else _node(pool, name)
        free = pool.free_gpus(node)
        if any(g not in free for g in gpus) or not pool.runnable(job, node):
            return False
        cpus, mem = job.demand_on(placement, len(gpus))
        if cpus and pool.free_cpus(node) + 1e-9 < cpus:
            return False
        if mem and pool.free_memory_gb(node) + 1e-9 < mem:
            return False
    return True


def _node(pool: FreePool, name: str) -> NodeView:
    for node in pool.nodes:
        if node.name == name:
            return node
    raise KeyError(name)
