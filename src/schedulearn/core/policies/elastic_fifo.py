"""Elastic FIFO: every job first gets its minimum GPUs in arrival order; spare
GPUs then go one at a time to running elastic jobs up to their maximum,
and a newcomer that does not fit shrinks the youngest elastic jobs back
toward their minimum. Source: the original Schedulearn's Elastic FIFO
(thesis and blog post), rebuilt on resize decisions instead of
kill-and-restart.

Rule in full, one pass:
1. Pending jobs, oldest first, start at their minimum (`least_gpus`),
   packed onto the fewest nodes. When a job does not fit, shrink running
   elastic jobs, youngest (latest submitted) first, one GPU at a time and
   never below their minimum, until it fits. If it still cannot fit, undo
   those shrinks and stop: later jobs wait behind it, as in FIFO.
2. Only when nobody waits: hand spare GPUs out one at a time, round-robin
   over running elastic jobs in arrival order, each up to its maximum
   (`most_gpus`).

Only preemptible jobs are ever resized, and never one younger than
`min_age` seconds on its current placement (default 120), so that a
resize, which costs a checkpoint and restore, is not undone at once. A
resize keeps the job on as few nodes as possible: it grows on a node it
already uses, or moves whole onto one node, and only when neither can
hold it does it spread, packed afresh onto the fewest nodes that hold
the bigger size (so a job grows past one node, and a job shrunk for a
newcomer grows back once room returns); it shrinks by leaving its
smallest part first.
Jobs shrunk in a pass do not grow in the same pass.

The policy asks to be called every 60 s (`tick_seconds`) so that jobs
that come of age can take GPUs that are idle while nothing else happens.
"""

from __future__ import annotations

from typing import ClassVar

from schedulearn.core.decisions import Decision, Resize, Start
from schedulearn.core.placement import FreePool
from schedulearn.core.policies._resize import grow_one, old_enough, shrink_one
from schedulearn.core.policy import QueueOrder, arrival_order
from schedulearn.core.registry import register
from schedulearn.core.views import ClusterView, JobView, Placement


@register
class ElasticFifo:
    name: ClassVar[str] = "elastic-fifo"
    tick_seconds: ClassVar[float | None] = 60.0

    def __init__(self, min_age: float = 120.0) -> None:
        if min_age < 0:
            raise ValueError(f"elastic-fifo: min_age must be 0 or more seconds, not {min_age}")
        self.min_age = float(min_age)
        # A cache, not state: the elastic preemptible jobs of the last
        # `running` tuple seen, so ticks over an unchanged cluster skip the scan.
        self._seen: tuple[tuple[JobView, ...], list[JobView]] = ((), [])

    def _elastic(self, view: ClusterView) -> list[JobView]:
        """Running jobs this policy may ever resize (preemptible and elastic)."""
        running = view.running
        if self._seen[0] is not running:
            found = [
                j
                for j in running
                if (j.min_gpus is not None or j.max_gpus is not None)
                and j.preemptible
                and j.is_elastic
            ]
            self._seen = (running, found)
        return self._seen[1]

    def order(self, view: ClusterView) -> QueueOrder:
        return arrival_order(
            view, "arrival order, each job at its minimum GPUs; the head waits for room"
        )

    def decide(self, view: ClusterView) -> list[Decision]:
        elastic = self._elastic(view)
        if not view.pending and not elastic:
            return []
        pool = FreePool(view)
        free = pool.total_free()
        if free == 0 and not view.pending:
            return []
        # Running jobs' placements as changed in this pass (job id -> placement).
        changed: dict[int, Placement] = {}
        shrunk: set[int] = set()
        decisions: list[Decision] = []
        blocked = False
        for job in self.order(view).jobs:
            size = job.least_gpus
            placement = pool.pack(job, size) if size <= free else None
            if placement is not None:
                pool.take(job, placement)
                free -= size
            else:
                placement = self._shrink_for(view, elastic, pool, job, size, changed, shrunk)
                if placement is None:
                    blocked = True
                    break
                pool.take(job, placement)
                free = pool.total_free()
            decisions.append(Start(job.id, placement))
        if not blocked:
            self._grow(view.now, elastic, pool, changed, shrunk)
        if changed:
            for job in elastic:
                placement = changed.get(job.id)
                if placement is not None and placement != job.placement:
                    decisions.append(Resize(job.id, placement))
        return decisions

    def _of_age(self, job: JobView, now: float) -> bool:
        """Has the job run on its placement long enough to be resized?"""
        return old_enough(job, now, self.min_age)

    def _shrink_for(
        self,
        view: ClusterView,
        elastic: list[JobView],
        pool: FreePool,
        job: JobView,
        size: int,
        changed: dict[int, Placement],
        shrunk: set[int],
    ) -> Placement | None:
        """Shrink the youngest elastic jobs until `job` fits at `size`; undo if it never does."""
        victims = sorted(
            (j for j in elastic if self._of_age(j, view.now)),
            key=lambda j: (-j.submitted_at, -j.id),
        )
        if not victims:
            return None
        before = dict(changed)
        newly: set[int] = set()
        for victim in victims:
            if job.gpu_type and not _has_type(view, victim, job.gpu_type):
                continue
            current = _current(victim, changed)
            while current.num_gpus > victim.least_gpus:
                smaller = shrink_one(pool, victim, current)
                if smaller is None:
                    break
                current = changed[victim.id] = smaller
                newly.add(victim.id)
                placement = pool.pack(job, size)
                if placement is not None:
                    shrunk |= newly
                    return placement
        # It never fitted: put every victim back as it was.
        for victim_id in newly:
            victim = next(j for j in victims if j.id == victim_id)
            pool.release(victim, changed[victim_id])
            original = before.get(victim_id, victim.placement)
            assert original is not None
            pool.take(victim, original)
        changed.clear()
        changed.update(before)
        return None

    def _grow(
        self,
        now: float,
        elastic: list[JobView],
        pool: FreePool,
        changed: dict[int, Placement],
        shrunk: set[int],
    ) -> None:
        """Hand spare GPUs one at a time, round-robin, to elastic jobs in arrival order."""
        if not elastic:
            return
        free = pool.total_free()
        if free == 0:
            return
        growing = sorted(
            (
                j
                for j in elastic
                if j.id not in shrunk
                and self._of_age(j, now)
                and _current(j, changed).num_gpus < j.most_gpus
            ),
            key=lambda j: (j.submitted_at, j.id),
        )
        while growing and free > 0:
            still: list[JobView] = []
            for job in growing:
                if free == 0:
                    break
                current = _current(job, changed)
                bigger = grow_one(pool, job, current, spread=True)
                if bigger is None:
                    continue
                changed[job.id] = bigger
                free -= 1
                if bigger.num_gpus < job.most_gpus:
                    still.append(job)
            growing = still


def _current(job: JobView, changed: dict[int, Placement]) -> Placement:
    """A running job's placement as this pass has left it so far."""
    placement = changed.get(job.id, job.placement)
    assert placement is not None, "only running jobs are resized"
    return placement


def _has_type(view: ClusterView, job: JobView, gpu_type: str) -> bool:
    """Does `job` hold GPUs on a node of `gpu_type` (so shrinking it can help)?"""
    assert job.placement is not None
    names = set(job.placement.nodes)
    return any(node.gpu_type == gpu_type for node in view.nodes if node.name in names)
