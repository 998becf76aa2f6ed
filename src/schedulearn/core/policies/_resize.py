"""Growing and shrinking a running elastic job by one GPU at a time.

Used by `elastic-fifo`. The rule that keeps resizes cheap: a job stays
on as few nodes as possible. It grows on a node it already uses (the
one with the most free GPUs), or, if it runs on one node that has no GPU
to spare, moves whole onto one node that holds the bigger size; only
when neither is possible does it spread (`spread=True`): the bigger size
is packed afresh onto the fewest nodes that hold it (a resize restarts
the job anyway). It shrinks by giving up a GPU on the node where it
holds the fewest, so a gang sheds whole nodes first.

The functions work on the caller's `FreePool`, in which the job's
current placement is taken. On success the pool holds the new placement;
on failure it is unchanged. No state lives here.
"""

from __future__ import annotations

from schedulearn.core.placement import FreePool
from schedulearn.core.preemption import can_retake
from schedulearn.core.views import JobView, NodeView, Placement


def old_enough(job: JobView, now: float, min_age: float) -> bool:
    """May `job` be resized or moved yet? Only after `min_age` seconds on its
    placement, since each resize costs a checkpoint and a restart. The one
    place this rule is written (elastic-fifo and defrag use it)."""
    return job.started_at is None or now - job.started_at >= min_age


def grow_one(
    pool: FreePool, job: JobView, current: Placement, spread: bool = False
) -> Placement | None:
    """`current` with one more GPU, or None if the job cannot grow (without
    spreading onto another node, unless `spread`)."""
    nodes = _nodes_of(pool, current)
    pool.release(job, current)
    # In place: the job's own node with the most free GPUs first.
    for node in sorted(nodes, key=lambda n: (-pool.num_free(n), n.name)):
        mine = set(current.gpus_on(node.name))
        extra = next((g for g in pool.free_gpus(node) if g not in mine), None)
        if extra is None:
            continue
        parts = {name: list(gpus) for name, gpus in current}
        parts[node.name].append(extra)
        grown = Placement.of(parts)
        if can_retake(pool, job, grown):
            pool.take(job, grown)
            return grown
    # A one-node job may move whole onto another single node.
    if current.num_nodes == 1:
        moved = pool.best_fit(job, current.num_gpus + 1)
        if moved is not None:
            pool.take(job, moved)
            return moved
    if spread:
        # Across nodes: the bigger size on the fewest nodes that hold it.
        packed = pool.gang(job, current.num_gpus + 1)
        if packed is not None:
            pool.take(job, packed)
            return packed
    pool.take(job, current)
    return None


def shrink_one(pool: FreePool, job: JobView, current: Placement) -> Placement | None:
    """`current` with one GPU fewer, taken from the node where the job holds
    the fewest; None if no such placement fits the job's CPU and memory."""
    if current.num_gpus <= 0:
        return None
    pool.release(job, current)
    # Fewest GPUs first (drops whole nodes of a gang first), then the last node.
    order = sorted(enumerate(current.parts), key=lambda ip: (len(ip[1][1]), -ip[0]))
    for _, (name, gpus) in order:
        if not gpus:
            continue
        parts = {n: list(g) for n, g in current if n != name}
        if len(gpus) > 1 or not parts:
            parts[name] = list(gpus[:-1])
        shrunk = Placement.of(parts)
        if can_retake(pool, job, shrunk):
            pool.take(job, shrunk)
            return shrunk
    pool.take(job, current)
    return None


def _nodes_of(pool: FreePool, placement: Placement) -> list[NodeView]:
    names = set(placement.nodes)
    return [node for node in pool.nodes if node.name in names]
