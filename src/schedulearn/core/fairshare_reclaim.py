"""Reclaim: a queue below its bound takes GPUs back from queues over theirs.

Steps 3 and 5 of a fair-share pass (see `core.fairshare`): a queue below
its guarantee (or below its fair share) starts its waiting jobs, in the
inner policy's order, on free GPUs or on GPUs of preemptible jobs of
queues over their bound (`fairshare_stranded._victims`); a queue
guaranteed typed GPUs reclaims on GPUs of those types. A step that would
strand a job this pass put back in line is undone.
"""

from __future__ import annotations

from collections.abc import Iterator

from schedulearn.core.decisions import Preempt, Start
from schedulearn.core.fairshare_queues import QueueShare
from schedulearn.core.fairshare_state import EPS
from schedulearn.core.fairshare_stranded import GuardedState
from schedulearn.core.policy import queue_order
from schedulearn.core.preemption import make_room
from schedulearn.core.views import JobView, Placement, rebuild


class ReclaimingPass(GuardedState):
    """A pass's state with the reclaim steps."""

    def _reclaim(self, guarantee: bool) -> None:
        for s in self._share_order():
            bound = self._bound(s, guarantee)
            if s.used >= bound - EPS or not self._waiting(s.name):
                continue
            for job in queue_order(self.inner, self._sub_view(s.name)).jobs:
                if not self._open(job.id):
                    continue
                if not s.may_hold(job) or not s.within(job.gpus, bound):
                    continue
                # The inner policy may have passed over it (its own order, a
                # head-of-line wait): work within the bound starts if it fits.
                placement = self._pack(job, s, guarantee) if job.gpus <= self.free else None
                if placement is not None:
                    saved = self._save() if self.again else None
                    self._take(job, placement)
                    self._started(s, job, placement)
                    self.decisions.append(Start(job.id, placement))
                    if saved is not None and self._stranded() is not None:
                        # Its start would make its queue's jobs victims
                        # for a job this pass suspended: it waits.
                        self._restore(saved, [(job, placement)], [])
                        continue
                    if s.used >= bound - EPS:
                        break
                    continue
                victims = self._victims(s, guarantee)
                if not victims or self.free + sum(v.allocated_gpus for v in victims) < job.gpus:
                    continue
                if self._make_room(s, job, victims, guarantee) and s.used >= bound - EPS:
                    break

    def _make_room(self, s: QueueShare, job: JobView, victims: list[JobView], g: bool) -> bool:
        # Every victim's queue is over its bound now; one may end below it
        # (a gang's GPUs come whole): the waiting queue's bound comes first.
        for candidate in _typed_variants(job, s, g):
            allowed = victims
            while allowed:
                room = make_room(self.pool, candidate, allowed, self.free)
                if room is None:
                    break
                saved = self._save()  # make_room changed the pool only
                placement, used = room
                self._commit_room(s, job, placement, used)
                stranded = self._stranded()
                if stranded is None:
                    return True
                # It would leave a queue below its guarantee with a job it
                # suspended that others' jobs could make room for: undo, and
                # try again without that queue's jobs as victims.
                self._restore(saved, [(job, placement)], used)
                fewer = [v for v in allowed if v.queue != stranded]
                if len(fewer) == len(allowed):
                    break
                allowed = fewer
        return False

    def _commit_room(
        self, s: QueueShare, job: JobView, placement: Placement, used: list[JobView]
    ) -> None:
        """Record what `make_room` did to the pool: victims out, `job` started."""
        book = self.book
        # make_room changed the pool; mirror it in the node views.
        for v in used:
            assert v.placement is not None
            self._mark(v, v.placement, None)
            self.free += v.allocated_gpus
            book[v.queue].used -= v.allocated_gpus
            if v.id in self.fresh:
                self._withdraw(v)
            else:
                self.stopped.add(v.id)
                self.again[v.id] = v
                self.decisions.append(Preempt(v.id))
        self._mark(job, placement, job.id)
        self.free -= placement.num_gpus
        self._started(s, job, placement)
        self.decisions.append(Start(job.id, placement))

    def _pack(self, job: JobView, s: QueueShare, guarantee: bool) -> Placement | None:
        for candidate in _typed_variants(job, s, guarantee):
            placement = self.pool.pack(candidate)
            if placement is not None:
                return placement
        return None


def _typed_variants(job: JobView, s: QueueShare, guarantee: bool) -> Iterator[JobView]:
    """The job as it may reclaim: on its queue's guaranteed GPU types when those are typed."""
    types = s.queue.typed if guarantee else ()
    if not types or job.gpu_type:
        yield job
        return
    for t in types:
        yield rebuild(job, gpu_type=t)
