"""SRTF's waiting jobs in rank order, kept from one pass to the next (a cache).

`Srtf` ranks every waiting job at every pass (`_rank`: its estimated
remaining time, then arrival) and sorts them: on a backlogged cluster
thousands of jobs, and under the fair-share layer (`core.fairshare`)
several times a pass, for one queue's jobs (a reclaim), some queues'
(the entitled turn) and every job (the borrow turn). `RankedWaiting`
keeps the jobs of the snapshot it follows sorted by rank and updates
them by what changed since the last one (found by object identity, in
C); a tuple clearly smaller than the one it follows (a part) is
answered by filtering the kept order by identity and placing the few
views not in it, without following it.

It is a cache: its order is exactly the sort of every job's `_rank`.
Why that holds: a waiting job whose view has no `started_at` (every
waiting job a simulator hands) has a remaining time that does not
depend on the time (`JobView.remaining_at`: its service is fixed while
it waits), so its rank is a function of its frozen view; ranks end in
the job's id, so the order is total; the cache holds every view it
knows, so no object id is reused while it is known. A view with a
`started_at`, or one view twice, makes it answer None (the caller sorts
directly).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from itertools import compress, islice
from operator import eq, itemgetter

from schedulearn.core.policies.kept_backlog import changed_middle
from schedulearn.core.views import JobView

Rank = tuple[bool, float, float, int]


def rank(job: JobView) -> Rank:
    """A waiting job's place in SRTF's order: shortest estimated remaining time
    first, no estimate last, then arrival (`Srtf._rank` for a job that waits)."""
    remaining = job.remaining_at(0.0)
    return (remaining is None, remaining or 0.0, job.submitted_at, job.id)


class RankedWaiting:
    """SRTF's waiting jobs sorted by rank, kept across passes; see the module doc."""

    __slots__ = ("_built", "_jobs", "_keys", "_pending", "_views")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._pending: tuple[JobView, ...] | None = None
        self._views: dict[int, JobView] = {}  # id(view) -> view
        # Whether the order below holds `_views` (else only `_views` is known).
        self._built = False
        self._keys: list[Rank] = []
        self._jobs: list[JobView] = []

    def order(self, pending: tuple[JobView, ...]) -> list[JobView] | None:
        """`pending` sorted by rank; None when the cache cannot say."""
        if pending is self._pending and self._built:
            return list(self._jobs)
        if self._built and 4 * len(pending) < 3 * len(self._views):
            part = self._part(pending)
            if part is not None:
                return part
        if not self._follow(pending):
            return None
        return list(self._jobs)

    def _part(self, pending: tuple[JobView, ...]) -> list[JobView] | None:
        """A part of the followed snapshot: the kept order filtered, and the
        few views not in it placed; None when it cannot say."""
        given = dict(zip(map(id, pending), pending, strict=True))
        if len(given) != len(pending):
            return None
        new = given.keys() - self._views.keys()
        if len(new) > len(pending) // 4 + 16:
            return None
        mine = given.__contains__
        out = list(compress(self._jobs, map(mine, map(id, self._jobs))))
        for key in new:
            view = given[key]
            if view.started_at is not None:
                return None
            insort(out, view, key=rank)
        return out

    def _follow(self, pending: tuple[JobView, ...]) -> bool:
        """Bring the order to `pending`; False when it cannot (the caller sorts)."""
        last = self._pending
        bound = len(pending) // 2 + 16
        if self._built and last is not None:
            # A host that keeps its views changes a few a pass: the same views
            # at both ends are skipped, compared by identity in C.
            was, now_in = changed_middle(last, pending)
            if len(was) + len(now_in) > bound:
                was = self._views
                now_in = dict(zip(map(id, pending), pending, strict=True))
            gone = was.keys() - now_in.keys()
            new = now_in.keys() - was.keys()
            if len(gone) + len(new) <= bound:
                if self._apply([was[k] for k in gone], [now_in[k] for k in new], pending):
                    return True
                self._reset()
                return False
        current = dict(zip(map(id, pending), pending, strict=True))
        self._reset()
        if len(current) != len(pending) or any(v.started_at is not None for v in pending):
            return False  # one view twice, or a rank that moves with time: the caller sorts
        # Built here even when most views are new (the first pass on a backlog): the
        # sort below stands in for the caller's, so the next pass, which shares most
        # of them, need not sort again.
        # By rank alone (a stable sort, in C): equal ranks are one job twice, found
        # next to each other once sorted.
        ranked = sorted(zip(map(rank, pending), pending, strict=True), key=_FIRST)
        keys = list(map(_FIRST, ranked))
        if any(map(eq, keys, islice(keys, 1, None))):
            return False  # one job twice: the caller sorts
        self._views, self._pending, self._built = current, pending, True
        self._keys = keys
        self._jobs = list(map(_SECOND, ranked))
        return True

    def _apply(self, gone: list[JobView], new: list[JobView], pending: tuple[JobView, ...]) -> bool:
        """The views in `gone` left and those in `new` joined."""
        views, keys, jobs = self._views, self._keys, self._jobs
        for view in gone:
            at = bisect_left(keys, rank(view))
            if at >= len(jobs) or jobs[at] is not view or views.pop(id(view), None) is None:
                return False
            del keys[at]
            del jobs[at]
        for view in new:
            key = id(view)
            if key in views or view.started_at is not None:
                return False  # one view twice, or a rank that moves with time
            k = rank(view)
            at = bisect_left(keys, k)
            if at < len(keys) and keys[at] == k:
                return False  # one job twice
            keys.insert(at, k)
            jobs.insert(at, view)
            views[key] = view
        if len(views) != len(pending):
            return False  # one view twice in `pending`
        self._pending = pending
        return True


_FIRST = itemgetter(0)
_SECOND = itemgetter(1)
