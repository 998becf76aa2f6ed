"""Time slicing: when jobs wait that do not fit, preemptible running jobs that
have run at least a quantum are suspended in favour of the jobs that have
waited longest, so all jobs take turns; when nobody waits it is FIFO with
packing. Source: Gandiva's time slicing (Xiao et al., "Gandiva:
Introspective Cluster Scheduling for Deep Learning", OSDI 2018).

Rule in full, one pass: take pending jobs by how long they have waited
(`JobView.waiting_since`, oldest first: a suspended job goes to the back
of the line, which makes the turns round-robin). Each one that fits
starts (one node when it fits, else a gang over the fewest nodes). The
first one that does not fit makes the cluster oversubscribed: it
suspends running preemptible jobs whose current slice has lasted at
least `quantum` seconds (default 600), longest slice first, as few as it
needs. If even that cannot make room it waits, and later jobs wait
behind it as in FIFO, so the job at the front always gets the next
slice. Non-preemptible jobs run to the end.

The policy asks to be called every quarter quantum (`tick_seconds =
quantum / 4`), so a slice overruns its quantum by at most a quarter.
A suspended job pays the host's checkpoint and restore cost; pick a
quantum well above that cost (Gandiva used minutes).
"""

from __future__ import annotations

from typing import ClassVar

from schedulearn.core.decisions import Decision, Start
from schedulearn.core.placement import FreePool
from schedulearn.core.policy import QueueOrder
from schedulearn.core.preemption import Victims
from schedulearn.core.registry import register
from schedulearn.core.views import ClusterView


@register
class Timeslice:
    name: ClassVar[str] = "timeslice"
    # Per instance, not a class constant: the tick follows the quantum.
    tick_seconds: float | None

    def __init__(self, quantum: float = 600.0) -> None:
        if quantum <= 0:
            raise ValueError(f"timeslice: quantum must be more than 0 seconds, not {quantum}")
        self.quantum = float(quantum)
        self.tick_seconds = self.quantum / 4.0

    def order(self, view: ClusterView) -> QueueOrder:
        return QueueOrder(
            tuple(sorted(view.pending, key=lambda j: (j.waiting_since, j.submitted_at, j.id))),
            "longest waiting first (since submission or last suspension)",
        )

    def _victims(self, view: ClusterView, pool: FreePool) -> Victims:
        """Preemptible running jobs whose slice is used up, the longest slice first
        (all of one level: any of them may make room for any waiting job)."""
        now, quantum = view.now, self.quantum
        return Victims(
            view,
            pool,
            lambda j: 0.0,
            lambda j: (j.started_at or 0.0, j.id),
            may=lambda j: j.started_at is not None and now - j.started_at >= quantum,
        )

    def decide(self, view: ClusterView) -> list[Decision]:
        if not view.pending:
            return []
        pool = FreePool(view)
        free = pool.total_free()
        decisions: list[Decision] = []
        victims: Victims | None = None  # built when a job does not fit
        for job in self.order(view).jobs:
            placement = pool.pack(job) if job.gpus <= free else None
            if placement is not None:
                pool.take(job, placement)
                free -= placement.num_gpus
                decisions.append(Start(job.id, placement))
                continue
            if victims is None:
                victims = self._victims(view, pool)
            room = victims.room_for(job, free)
            if room is None:
                break
            decisions.extend(room.decisions)
            free = room.free
        return decisions
