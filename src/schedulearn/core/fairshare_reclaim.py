"""Reclaim: a queue below its guarantee takes its GPUs back from queues that borrowed.

Step 2 of a fair-share pass (see `core.fairshare`). Each queue below its
guarantee, counting the GPUs of its jobs that fit it (`QueueShare.fitting`:
a job larger than the guarantee runs on borrowed GPUs only and takes
nothing from it), and behind on its fraction of the GPU-time (not
`ahead`), with a waiting job that fits in what is left, starts that job,
in the inner policy's order, on free GPUs, or else on GPUs of jobs it
preempts (`victims`): jobs of other queues over their deserved share
that have run `min_run` seconds; jobs a live host is still stopping
(`JobView.stopping`) first, whatever they ran, then preemptible ones,
then the queue furthest over its share (per weight) first, then the
latest started first; never so many of one queue's fitting jobs that it
would fall below its own guarantee (so a reclaim never makes another
reclaim, and queues cannot take GPUs from each other in turn), while its
jobs larger than the guarantee may always be taken. A non-preemptible
job beyond its queue's guarantee is a victim like any other: it is
requeued (`Preempt.reclaimed_by`) and restarts. A queue guaranteed only
typed GPUs reclaims on GPUs of those types.

Cost: on a contended cluster most reclaims find nothing to take. A queue
none of whose waiting jobs within its guarantee fits its limit, or the
free GPUs and every victim's together, is not ranked by the inner policy
at all, and a walk stops as soon as none of the rest can start (the
decisions are the same as walking every job).
"""

from __future__ import annotations

from collections.abc import Iterator

from schedulearn.core.fairshare_queues import QueueShare
from schedulearn.core.fairshare_state import EPS, PassState
from schedulearn.core.policy import queue_order
from schedulearn.core.preemption import make_room
from schedulearn.core.views import JobView, Placement, rebuild


class ReclaimingPass(PassState):
    """A pass's state with the reclaim step."""

    def reclaim(self) -> None:
        """Every queue below its guarantee, furthest below first, takes GPUs back.

        A start within one queue's guarantee can take that queue past its
        deserved share (its other jobs run beyond the guarantee, on
        borrowed GPUs): what it holds beyond is then the reclaim's to take,
        so the queues are visited again, in this pass rather than at the
        next event, until a round takes none past its share. Each round
        only starts jobs within guarantees, so the rounds end.
        """
        while True:
            below = [
                s
                for s in self.book.values()
                if s.pending > 0 and s.fitting < s.guaranteed and not s.ahead
            ]
            if not below:
                return
            below.sort(key=lambda s: (s.fitting / s.guaranteed, s.name))
            over = self._over_share()
            for s in below:
                self._reclaim_for(s)
            if self._over_share() <= over:
                return

    def _over_share(self) -> set[str]:
        return {s.name for s in self.book.values() if s.used > s.share + EPS}

    def _reclaim_for(self, s: QueueShare) -> None:
        waiting = self.waiting({s.name})
        guaranteed = s.guaranteed  # fixed for the pass (`fill`); its fitting GPUs move
        room = guaranteed - s.fitting
        cap, decided = s.cap, self.decided
        # The fewest GPUs a job it may start here asks for (within the guarantee
        # and its limit): none, or more than the free GPUs and every victim's
        # together, and no job starts, in whatever order the inner policy puts
        # them; then it is not asked.
        least = min((j.gpus for j in waiting if j.gpus <= room), default=None)
        if least is None or s.used + least > cap:
            return
        smallest = least
        victims: list[JobView] | None = None  # computed when first needed
        gain = 0
        if smallest > self.free:
            # No job fits the free GPUs: the walk below takes the victims first.
            victims = self.victims(s)
            gain = sum(v.allocated_gpus for v in victims)
            if self.free + gain < smallest:
                return
        # The inner policy may have passed over these jobs (its own order, a
        # head-of-line wait): work within the guarantee starts if it fits.
        failed = 1 << 30  # the fewest GPUs a plain job could not make room for
        for job in queue_order(self.inner, self.sub_view(waiting)).jobs:
            fitting = s.used - s.beyond  # `QueueShare.fitting`, read in the loop
            if fitting >= guaranteed:
                return
            if victims is not None and self.free + gain < smallest:
                # No job of the queue fits in the free GPUs and all the victims'
                # together, and nothing changes until one starts: none will.
                return
            gpus = job.gpus
            if fitting + gpus > guaranteed or job.id in decided:
                continue
            if s.used + gpus > cap:  # `QueueShare.may_hold`
                continue
            placement = self._pack(job, s) if gpus <= self.free else None
            if placement is not None:
                self.take(job, placement)
                self.start(job, placement)
                continue
            plain = not job.gpu_type and not s.queue.typed
            if plain and gpus >= failed:
                continue  # no more room than for a smaller job: the same victims
            if victims is None:
                victims = self.victims(s)
                gain = sum(v.allocated_gpus for v in victims)
            if self.free + gain < gpus:
                continue
            if self._make_room(s, job, victims):
                victims = None  # the book moved: victims again for the next job
            elif plain:
                failed = gpus

    def victims(self, s: QueueShare) -> list[JobView]:
        """Running jobs `s` may take back, in the order they are taken (module doc)."""
        book = self.book
        by_queue: dict[str, list[JobView]] = {}
        for j in self.running.values():
            if j.queue == s.name or j.id in self.decided:
                continue
            if not (j.stopping or self.ran_min(j)):
                continue
            owner = book[j.queue]
            if owner.used <= owner.share + EPS:
                continue
            if owner.fitting <= owner.guaranteed and not owner.is_beyond(j):
                continue
            by_queue.setdefault(j.queue, []).append(j)
        out: list[tuple[tuple[bool, bool, float, float, int], JobView]] = []
        for name, jobs in by_queue.items():
            owner = book[name]
            over = (owner.used - owner.share) / owner.queue.weight
            # Jobs already stopping first (taking one again costs nothing; a
            # live host shows them until their process exits, and taking a
            # new victim instead would stop one job too many), then latest
            # started first, while the queue keeps its guarantee (a job
            # larger than it runs on borrowed GPUs only: always takeable).
            budget = owner.fitting - owner.guaranteed
            jobs.sort(
                key=lambda j: (not j.stopping, not j.preemptible, -(j.started_at or 0.0), -j.id)
            )
            for j in jobs:
                if not owner.is_beyond(j):
                    if j.allocated_gpus > budget:
                        continue
                    budget -= j.allocated_gpus
                key = (not j.stopping, not j.preemptible, -over, -(j.started_at or 0.0), -j.id)
                out.append((key, j))
        out.sort(key=lambda t: t[0])
        return [j for _, j in out]

    def _make_room(self, s: QueueShare, job: JobView, victims: list[JobView]) -> bool:
        # make_room passes over non-preemptible jobs; a reclaim requeues them.
        as_given = {v.id: v for v in victims}
        movable = [v if v.preemptible else rebuild(v, preemptible=True) for v in victims]

        # A node the job fits whole may be emptied with victims of the tier
        # the plain walk reaches (`victims`' order: stopping, preemptible, then
        # how far over its share the owner is), never of a queue less over it.
        def tier(v: JobView) -> tuple[bool, bool, float]:
            given = as_given[v.id]
            owner = self.book[given.queue]
            over = (owner.used - owner.share) / owner.queue.weight
            return (given.stopping, given.preemptible, over)

        for candidate in _typed_variants(job, s):
            room = make_room(self.pool, candidate, movable, self.free, tier=tier)
            if room is None:
                continue
            placement, used = room
            # make_room changed the pool; mirror it in the node views and the book.
            for v in used:
                assert v.placement is not None
                self.mark(v.placement, None)
                self.free += v.allocated_gpus
                self.stop(as_given[v.id], reclaimed_by=s.name)
            self.mark(placement, job.id)
            self.free -= placement.num_gpus
            self.start(job, placement)
            return True
        return False

    def _pack(self, job: JobView, s: QueueShare) -> Placement | None:
        for candidate in _typed_variants(job, s):
            placement = self.pool.pack(candidate)
            if placement is not None:
                return placement
        return None


def _typed_variants(job: JobView, s: QueueShare) -> Iterator[JobView]:
    """The job as it may reclaim: on its queue's guaranteed GPU types when those are typed."""
    types = s.queue.typed
    if not types or job.gpu_type:
        yield job
        return
    for t in types:
        yield rebuild(job, gpu_type=t)
