"""One fair-share pass: the share round and lending, each a turn of the inner policy.

Steps 2 and 4 of `core.fairshare` (the module doc there has the whole
pass): each queue in turn gets one pass of the inner policy over its own
jobs on the GPUs still free, and keeps its decisions, in its order, while
they fit the queue's allowance, limit and guarantee for non-preemptible
jobs. `SharePass.run` runs the steps in order, reclaim included
(`fairshare_reclaim`).
"""

from __future__ import annotations

from collections.abc import Iterator

from schedulearn.core.decisions import Decision, Preempt, Resize, Start
from schedulearn.core.fairshare_queues import QueueShare
from schedulearn.core.fairshare_reclaim import ReclaimingPass
from schedulearn.core.fairshare_state import EPS
from schedulearn.core.placement import FreePool
from schedulearn.core.policy import queue_order
from schedulearn.core.views import JobView, Placement, rebuild


class SharePass(ReclaimingPass):
    """One slow pass of the fair-share layer: share round, reclaim, lend, reclaim."""

    def run(self) -> list[Decision]:
        book = self.book
        for s in self._share_order():
            if self._waiting(s.name):
                self._turn(s, int(s.share + EPS) - s.used)
        self._reclaim(guarantee=True)
        self._reclaim(guarantee=False)
        for s in sorted(book.values(), key=self._lend_key):
            if self.free <= 0:
                break
            if self._waiting(s.name):
                self._turn(s, s.cap - s.used)
        self._reclaim(guarantee=True)
        return self.decisions

    def order(self) -> list[JobView]:
        out: list[JobView] = []
        for s in self._share_order():
            if self.pending.get(s.name):
                out.extend(queue_order(self.inner, self._sub_view(s.name)).jobs)
        return out

    def _lend_key(self, s: QueueShare) -> tuple[float, int, str]:
        return (self.tenancy.usage.get(s.name, 0.0) / s.queue.weight, s.used, s.name)

    # --- one queue's turn with the inner policy ----------------------------

    def _turn(self, s: QueueShare, allowance: int) -> None:
        """One inner pass for queue `s`; keep its decisions while they fit `allowance`."""
        if allowance <= 0 or self.free <= 0:
            return
        sub = self._sub_view(s.name)
        if not sub.pending:
            return
        for group in _groups(self.inner.decide(sub)):
            if not self._accept(s, group, allowance):
                return
            allowance -= sum(self._delta(d) for d in group)

    def _delta(self, d: Decision) -> int:
        if isinstance(d, Start):
            return d.placement.num_gpus
        old = self.running[d.job_id].allocated_gpus
        if isinstance(d, Preempt):
            return -old
        return d.placement.num_gpus - old

    def _accept(self, s: QueueShare, group: list[Decision], allowance: int) -> bool:
        delta = sum(self._delta(d) for d in group)
        if delta > allowance or s.used + delta > s.cap:
            return False
        pinned = 0  # GPUs the group's non-preemptible starts add
        for d in group:
            if isinstance(d, Start):
                pend = self._pending_job(s.name, d.job_id)
                if pend is None:
                    return False
                if not pend.preemptible:
                    pinned += d.placement.num_gpus
            else:
                job = self.running.get(d.job_id)
                if job is None or job.queue != s.name or d.job_id in self.stopped:
                    return False
        if pinned and s.pinned + pinned > s.guaranteed:
            return False
        risky = bool(self.again) or any(isinstance(d, Preempt) for d in group)
        saved = self._save() if risky else None
        # Releases first, then check that every acquisition is free.
        released: list[JobView] = []
        for d in group:
            if isinstance(d, Preempt | Resize):
                victim = self.running[d.job_id]
                self._release(victim)
                released.append(victim)
        ok = all(_free_in(self.pool, d.placement) for d in group if isinstance(d, Start | Resize))
        if not ok:
            for victim in reversed(released):
                assert victim.placement is not None
                self._take(victim, victim.placement)
            return False
        taken: list[tuple[JobView, Placement]] = []
        for d in group:
            if isinstance(d, Start):
                pend = self._pending_job(s.name, d.job_id)
                assert pend is not None
                self._take(pend, d.placement)
                taken.append((pend, d.placement))
                self._started(s, pend, d.placement)
            elif isinstance(d, Preempt):
                victim = self.running[d.job_id]
                self.stopped.add(d.job_id)
                self.again[d.job_id] = victim
                s.used -= victim.allocated_gpus
                if not victim.preemptible:  # pragma: no cover - the ledger refuses it anyway
                    s.pinned -= victim.allocated_gpus
            else:
                old = self.running[d.job_id]
                moved = rebuild(old, placement=d.placement)
                self._take(moved, d.placement)
                taken.append((moved, d.placement))
                self.running[d.job_id] = moved
                s.used += d.placement.num_gpus - old.allocated_gpus
        if saved is not None and self._stranded() is not None:
            self._restore(saved, taken, released)
            return False
        self.decisions.extend(group)
        return True


def _groups(decisions: list[Decision]) -> Iterator[list[Decision]]:
    """Each Start with the preemptions and resizes decided just before it."""
    group: list[Decision] = []
    for d in decisions:
        group.append(d)
        if isinstance(d, Start):
            yield group
            group = []
    if group:
        yield group


def _free_in(pool: FreePool, placement: Placement) -> bool:
    by_name = {n.name: n for n in pool.nodes}
    for name, gpus in placement:
        node = by_name.get(name)
        if node is None:
            return False
        free = pool.free_gpus(node)
        if any(g not in free for g in gpus):
            return False
    return True
