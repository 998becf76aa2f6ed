"""One fair-share pass: admission in two turns of the inner policy, and reclaim.

Steps 1 to 3 of `core.fairshare` (the module doc there has the rule):
after the reclaim (`fairshare_reclaim`), the inner policy decides on the
whole cluster, first with only the waiting jobs of queues below their
deserved share (`_turn(entitled)`), then with every waiting job
(`_turn(borrow)`). Its decisions are kept in its order, a start with the
preemptions and resizes decided just before it as one group, while the
group keeps the queue rules (`_accept`); a refused group is dropped
whole, and a later group that counted on its GPUs is refused in turn
(its GPUs are not free), so no GPU is ever given twice.
"""

from __future__ import annotations

from collections.abc import Iterator

from schedulearn.core.decisions import Decision, Preempt, Resize, Start
from schedulearn.core.fairshare_reclaim import ReclaimingPass
from schedulearn.core.fairshare_state import EPS
from schedulearn.core.policy import queue_order
from schedulearn.core.views import JobView, rebuild


class SharePass(ReclaimingPass):
    """One full pass of the fair-share layer (see `core.fairshare`)."""

    def run(self) -> list[Decision]:
        self.reclaim()
        self.need = self._unmet()
        free, over = self.free, self._over_share()
        entitled = self._entitled()
        everyone = {s.name for s in self.book.values() if s.pending > 0}
        if entitled:
            self._turn(entitled, borrow=False)
        # With every waiting queue entitled and nothing free, the inner
        # policy has seen every job already: a second turn adds nothing.
        if self.free > 0 or entitled != everyone:
            self._turn(everyone, borrow=True)
        if any(self.need.values()) and (self.free > free or not self._over_share() <= over):
            # The turns freed GPUs (an inner preemption) or took a queue past
            # its deserved share: a queue still below its guarantee takes
            # them now, not at the next event.
            self.reclaim()
        return self.decisions

    def order(self) -> list[JobView]:
        """Jobs of queues below their deserved share first, each part in the inner order."""
        entitled = self._entitled()
        first = self.waiting(entitled)
        rest = tuple(j for j in self.view.pending if j.queue not in entitled)
        out: list[JobView] = []
        for part in (first, rest):
            if part:
                out.extend(queue_order(self.inner, self.sub_view(part)).jobs)
        return out

    def _unmet(self) -> dict[str, int]:
        """GPUs each queue below its guarantee still waits for, counting only
        waiting jobs that fit in its guarantee: idle GPUs nobody may borrow."""
        need: dict[str, int] = {}
        for s in self.book.values():
            room = s.guaranteed - s.fitting
            if room <= 0 or s.pending <= 0 or s.ahead:
                continue
            fit = 0
            for j in self.by_queue.get(s.name, ()):
                if j.gpus <= room and j.id not in self.decided:
                    fit += j.gpus
                    if fit >= room:
                        break
            if fit:
                need[s.name] = min(fit, room)
        return need

    def _entitled(self) -> set[str]:
        return {s.name for s in self.book.values() if s.pending > 0 and self.under_share(s)}

    # --- one turn of the inner policy ------------------------------------------

    def _turn(self, queues: set[str], borrow: bool) -> None:
        """Inner passes over the waiting jobs of `queues` until it keeps all it decides.

        A start the queue rules refuse leaves GPUs the inner policy had
        planned for: its queue leaves the turn and the inner policy
        decides once more for the others, if GPUs are free.
        """
        for _ in range(2):
            pending = self.waiting(queues)
            if not pending:
                return
            refused: set[str] = set()
            shown = self.sub_view(pending, turn=True, queues=queues)
            for group in _groups(self.inner.decide(shown)):
                if self._accept(group, borrow):
                    self._apply(group)
                elif isinstance(group[-1], Start) and group[-1].job_id in self.pending:
                    refused.add(self.pending[group[-1].job_id].queue)
            if not refused or self.free <= 0:
                return
            queues = {q for q in queues - refused if borrow or self.under_share(self.book[q])}
            if not queues:
                return

    def _accept(self, group: list[Decision], borrow: bool) -> bool:
        """May the pass keep this group (a start and what was done to make room)?"""
        last = group[-1]
        start = last if isinstance(last, Start) else None
        if any(d.job_id in self.decided for d in group):
            return False
        job = self.pending.get(start.job_id) if start is not None else None
        if start is not None and job is None:
            return False
        # GPUs each queue gains (a start, growth) or gives back (preemption,
        # shrinking), in all and of its jobs that fit its guarantee (only
        # those count against it: `QueueShare.fitting`).
        delta: dict[str, int] = {}
        fit_delta: dict[str, int] = {}

        def count(queue: str, job: JobView, change: int) -> None:
            delta[queue] = delta.get(queue, 0) + change
            if not self.book[queue].is_beyond(job):
                fit_delta[queue] = fit_delta.get(queue, 0) + change

        released: list[JobView] = []
        for d in group:
            if isinstance(d, Start):
                continue
            held = self.running.get(d.job_id)
            if held is None:
                return False
            n = d.placement.num_gpus if isinstance(d, Resize) else 0
            count(held.queue, held, n - held.allocated_gpus)
            released.append(held)
        if job is not None and start is not None:
            count(job.queue, job, start.placement.num_gpus)
        mine = job.queue if job is not None else None
        for name, change in delta.items():
            s = self.book[name]
            if s.used + change > s.cap:
                return False
            fitting_after = s.fitting + fit_delta.get(name, 0)
            if change >= 0 and fitting_after >= s.fitting:
                continue
            if (
                job is not None
                and self.stranded(job)
                and all(self.ran_min(v) for v in released if v.queue == name)
            ):
                continue  # a brief job that only borrows (`fairshare_fill.stranded`)
            if name == mine:
                # The inner policy reorders its queue's own jobs (tiresias's
                # least attained service first), but a queue below its
                # guarantee does not lose the GPUs that count against it.
                if fitting_after < min(s.guaranteed, s.fitting):
                    return False
                continue
            if s.ahead:
                # It is not behind on its share of GPU-time lately: its jobs
                # are lent, and go where the inner policy puts them once they
                # have run `min_run`, unless giving them up would leave it
                # behind within `LEND_FOR` runs of that (it would reclaim them
                # at once: a queue at its mark would flip, and its jobs and
                # the borrowers' be stopped, every few passes).
                if mine is None or not all(self.ran_min(v) for v in released if v.queue == name):
                    return False
                if (
                    fitting_after < s.fitting
                    and not self.lends(s, fitting_after)
                    and not (job is not None and self.brief(job))
                ):
                    return False
                continue
            # Another queue's jobs: never below that queue's guarantee (its
            # jobs larger than the guarantee may always be taken).
            if fitting_after < min(s.guaranteed, s.fitting):
                return False
            # Another queue's jobs: only from a queue over its deserved
            # share, after `min_run` (the reclaim's rule, for the inner
            # policy); in the entitled turn for a queue below its share, in
            # the borrow turn among queues beyond theirs (what they borrow
            # goes where the inner policy would put it).
            if mine is None or s.used <= s.share + EPS:
                return False
            if not all(self.ran_min(v) for v in released if v.queue == name):
                return False
        if job is not None and not borrow and not self.under_share(self.book[job.queue]):
            return False
        if job is not None and start is not None and self.need:
            # A start beyond its queue's guarantee borrows: never the idle
            # GPUs a queue below its guarantee is waiting for.
            s = self.book[job.queue]
            n = start.placement.num_gpus
            if s.is_beyond(job) or s.fitting + fit_delta.get(job.queue, 0) > s.guaranteed:
                others = sum(k for name, k in self.need.items() if name != job.queue)
                freed = sum(v.allocated_gpus for v in released)
                if self.free + freed - n < others:
                    return False
        # The GPUs it takes must be free once its own releases are done
        # (checked without releasing them: most groups proposed are refused).
        given_back: dict[str, set[int]] = {}
        for v in released:
            assert v.placement is not None
            for name, gpus in v.placement:
                given_back.setdefault(name, set()).update(gpus)
        placements = [d.placement for d in group if isinstance(d, Start | Resize)]
        return all(self.free_in(p, given_back) for p in placements)

    def _apply(self, group: list[Decision]) -> None:
        last = group[-1]
        if isinstance(last, Start) and last.job_id in self.pending:
            name = self.pending[last.job_id].queue
            if name in self.need:  # its start meets part of what it waited for
                self.need[name] = max(0, self.need[name] - last.placement.num_gpus)
        for d in group:
            if isinstance(d, Preempt):
                victim = self.running[d.job_id]
                self.release(victim)
                self.stop(victim)
            elif isinstance(d, Resize):
                old = self.running[d.job_id]
                self.release(old)
                moved = rebuild(old, placement=d.placement)
                self.take(moved, d.placement)
                self.running[d.job_id] = moved
                s = self.book[old.queue]
                self.moved()
                s.used += d.placement.num_gpus - old.allocated_gpus
                if s.is_beyond(old):
                    s.beyond += d.placement.num_gpus - old.allocated_gpus
                if not old.preemptible:  # pragma: no cover - the ledger refuses it
                    s.pinned += d.placement.num_gpus - old.allocated_gpus
                self.decided.add(d.job_id)
                self.decisions.append(d)
        last = group[-1]
        if isinstance(last, Start):
            job = self.pending[last.job_id]
            self.take(job, last.placement)
            self.start(job, last.placement)


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
