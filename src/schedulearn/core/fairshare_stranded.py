"""Who a reclaim may preempt, and the rule that no job this pass put back in line is stranded.

A job a fair-share pass suspends, or whose start it withdraws, cannot
start again in the same pass (a job appears once in a pass). So every
step that changes the pass's state is checked (`_stranded`) before it
stands: if afterwards such a job waits in a queue below its guarantee,
fits in it, and preemptible jobs (run `min_run`) of queues over their
guarantee could make room for it, the step is undone and refused. The
victims of that check and of a reclaim are chosen one way (`_victims`).
See `core.fairshare` for where each step asks.
"""

from __future__ import annotations

from schedulearn.core.fairshare_queues import QueueShare
from schedulearn.core.fairshare_state import EPS, PassState
from schedulearn.core.preemption import make_room
from schedulearn.core.views import JobView


class GuardedState(PassState):
    """A pass's state, with the victims other queues may lose and the stranded-job check."""

    def _bound(self, s: QueueShare, guarantee: bool) -> float:
        return float(s.guaranteed) if guarantee else s.share

    def _victims(self, s: QueueShare, guarantee: bool) -> list[JobView]:
        """Running jobs other queues may lose: preemptible, run `min_run`, queue over its bound."""
        now = self.view.now
        min_run = self.min_run
        book = self.book
        out: list[tuple[float, float, int, JobView]] = []
        # A start of this pass has run 0 s: a victim only when min_run is 0
        # (latest started first, so it goes before any job that really ran).
        fresh = self.fresh.values() if min_run <= EPS else ()
        for j in (*self.running.values(), *fresh):
            if j.id in self.stopped or not j.preemptible or j.queue == s.name:
                continue
            if j.started_at is None or now - j.started_at < min_run - EPS:
                continue
            owner = book[j.queue]
            over = owner.used - self._bound(owner, guarantee)
            if over <= EPS:
                continue
            out.append((-over / owner.queue.weight, -(j.started_at or 0.0), -j.id, j))
        out.sort(key=lambda t: t[:3])
        return [t[3] for t in out]

    def _stranded(self) -> str | None:
        """The queue of a job this pass preempted (or whose start it
        withdrew) left waiting below its guarantee, fitting in it, while
        preemptible jobs (run `min_run`) of queues over their guarantee
        could make room for it; None if there is none. Such a job cannot
        start again in this pass, so the step that led here is refused
        instead (see the module doc)."""
        pool = self.pool
        for p in self.again.values():
            s = self.book[p.queue]
            if s.used + p.gpus > s.guaranteed or not s.may_hold(p):
                continue
            victims = self._victims(s, guarantee=True)
            if not victims or self.free + sum(v.allocated_gpus for v in victims) < p.gpus:
                continue
            room = make_room(pool, p, victims, self.free)
            if room is None:
                continue
            # Only asked: put the pool back.
            placement, used = room
            pool.release(p, placement)
            for v in used:
                assert v.placement is not None
                pool.take(v, v.placement)
            return s.name
        return None
