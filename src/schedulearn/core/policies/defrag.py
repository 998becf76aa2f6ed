"""Defrag: FIFO with defragmenting migration. Jobs start in arrival order as
in `fifo`; when the head of the queue would fit on one node but the free
GPUs are scattered, preemptible jobs are moved off one node to make
room; and when nobody waits, a gang spread over several nodes is moved
whole onto one node that can hold it. Source: Gandiva's migration for
defragmentation and gang consolidation (Xiao et al., OSDI 2018).

Rule in full, one pass:
1. Pending jobs, oldest first, start as in `fifo` (one node when it fits,
   best fit, else a gang over the fewest nodes); the first that does not
   fit stops the queue.
2. A job that needs no more GPUs than one node has, but finds them only
   scattered (it does not fit, or only as a gang over several nodes),
   gets a node freed for it: pick the node that needs the fewest moves,
   where it fits once some preemptible jobs running only on that node
   move elsewhere (best fit, never onto that node). Emit those moves
   (`Resize` to the same size on other GPUs) and stop the queue; the job
   starts on one node on a later pass, once the moved jobs have left. If
   no node can be freed, it starts as a gang (or waits) as in `fifo`.
3. Only when nobody waits: each preemptible job spread over several
   nodes moves whole onto the one node that best fits it, if any.

Only preemptible jobs move, never one younger than `min_age` seconds on
its placement (the live server's `min_resize_age_seconds` is the
default), since a move costs a checkpoint and a restart. A job moves at
most once per pass. The policy asks to be called every 30 s so that jobs
that come of age can move while nothing else happens.
"""

from __future__ import annotations

from typing import ClassVar

from schedulearn.core.decisions import Decision, Resize, Start
from schedulearn.core.placement import FreePool, largest_node_gpus
from schedulearn.core.policies._resize import old_enough
from schedulearn.core.policy import QueueOrder, arrival_order
from schedulearn.core.registry import register
from schedulearn.core.views import ClusterView, JobView, NodeView, Placement


@register
class Defrag:
    name: ClassVar[str] = "defrag"
    tick_seconds: ClassVar[float | None] = 30.0

    def __init__(self, min_age: float = 120.0, consolidate: bool = True) -> None:
        if min_age < 0:
            raise ValueError(f"defrag: min_age must be 0 or more seconds, not {min_age}")
        self.min_age = float(min_age)
        self.consolidate = consolidate

    def order(self, view: ClusterView) -> QueueOrder:
        return arrival_order(
            view, "arrival order; the head waits for room, others may move to free a node for it"
        )

    def decide(self, view: ClusterView) -> list[Decision]:
        pool = FreePool(view)
        decisions: list[Decision] = []
        free = pool.total_free()
        for job in self.order(view).jobs:
            placement = pool.pack(job) if job.gpus <= free else None
            if placement is None:
                decisions.extend(self._make_room(view, pool, job, free))
                return decisions
            if placement.num_nodes > 1:
                # It would run as a gang only because free GPUs are scattered:
                # moving others to give it one node is worth a short wait.
                moves = self._make_room(view, pool, job, free)
                if moves:
                    decisions.extend(moves)
                    return decisions
            pool.take(job, placement)
            free -= placement.num_gpus
            decisions.append(Start(job.id, placement))
        if self.consolidate:
            decisions.extend(self._consolidate(view, pool))
        return decisions

    def _movable(self, view: ClusterView) -> list[JobView]:
        return [
            j
            for j in view.running
            if j.preemptible and j.placement is not None and old_enough(j, view.now, self.min_age)
        ]

    def _make_room(
        self, view: ClusterView, pool: FreePool, head: JobView, free: int
    ) -> list[Decision]:
        """Moves that free one node for `head`; none if no node can be freed."""
        if head.gpus == 0 or head.gpus > free or head.gpus > largest_node_gpus(view):
            return []
        # The movable jobs that run on one node only, by node, in `_movable`'s order.
        alone: dict[str, list[JobView]] = {}
        for job in self._movable(view):
            if job.placement is not None and job.placement.num_nodes == 1:
                alone.setdefault(job.placement.parts[0][0], []).append(job)
        best: list[Decision] | None = None
        for node in view.nodes:
            if not node.healthy or node.num_gpus < head.gpus:
                continue
            if head.gpu_type and node.gpu_type != head.gpu_type:
                continue
            moves = self._clear(pool, node, head, alone.get(node.name, []))
            if moves is not None and (best is None or len(moves) < len(best)):
                best = moves
        return best or []

    def _clear(
        self, pool: FreePool, node: NodeView, head: JobView, movable: list[JobView]
    ) -> list[Decision] | None:
        """Try moving jobs off `node` (`movable`: those running there alone) until
        `head` fits there; undo and None if it never does."""
        here = sorted(movable, key=lambda j: (-j.allocated_gpus, j.id))
        done: list[tuple[JobView, Placement]] = []
        while not pool.fits(node, head, head.gpus) and here:
            job = here.pop(0)
            assert job.placement is not None
            pool.release(job, job.placement)
            target = _best_elsewhere(pool, job, node.name)
            if target is None:
                pool.take(job, job.placement)
                continue
            pool.take(job, target)
            done.append((job, target))
        if done and pool.fits(node, head, head.gpus):
            # Keep the head's GPUs out of this pass's pool: they are its room.
            pool.take(head, pool.on_node(node, head.gpus))
            return [Resize(job.id, target) for job, target in done]
        for job, target in reversed(done):
            assert job.placement is not None
            pool.release(job, target)
            pool.take(job, job.placement)
        return None

    def _consolidate(self, view: ClusterView, pool: FreePool) -> list[Decision]:
        decisions: list[Decision] = []
        for job in self._movable(view):
            assert job.placement is not None
            if job.placement.num_nodes < 2:
                continue
            pool.release(job, job.placement)
            target = pool.best_fit(job, job.placement.num_gpus)
            if target is None:
                pool.take(job, job.placement)
                continue
            pool.take(job, target)
            decisions.append(Resize(job.id, target))
        return decisions


def _best_elsewhere(pool: FreePool, job: JobView, avoid: str) -> Placement | None:
    """The best-fitting single node for the whole `job`, other than `avoid`."""
    return pool.best_fit(job, job.allocated_gpus, avoid=avoid)
