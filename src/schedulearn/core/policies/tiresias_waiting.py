"""Tiresias's queues of waiting jobs, kept from one pass to the next (a cache).

A replay asks tiresias for a pass at every event, and on a backlogged
cluster hundreds of waiting jobs have reached a threshold: ranking every
one anew at every pass (its queue, whether it starves) was 40% of the
whole Philly trace's replay on 64x8. `WaitingQueues` keeps, for the
waiting jobs of the last snapshot, each queue in arrival order and when
each job starts to starve, and updates them by what changed between two
snapshots (found by object identity, a scan in C), so a pass costs what
changed, not what waits.

It is a cache: the lists are exactly `Tiresias.queue_of`'s queues, each
in (submission time, id) order, as ranking every job would give them.
Why that holds:

- a waiting job's queue depends on time only through starvation
  (`now - waiting_since > factor * service`), which, for a fixed view,
  is false before one float instant and true from it on (float
  subtraction is monotone): that instant is found once, exactly
  (`_first_starving`), and compared with `now`;
- views are frozen, so one seen before is the same job in the same state;
  the cache holds every view it knows, so no object id is reused while
  it is known;
- time going back (another host, a test), a view it cannot place (a
  starvation instant it cannot find exactly) or the same view twice in
  one queue make it rebuild or answer None (the caller ranks directly).

A caller may also ask about a part of the snapshot it follows, as the
fair-share layer does (`core.fairshare`: in one pass, one queue's jobs
for a reclaim, the queues below their share for the entitled turn, then
every job): a tuple clearly smaller than the one followed is answered by
filtering the followed queues, brought to `now`, by identity and ranking
the few views not among them (`_part`), without following it. (Followed,
each part then the whole again changed most views twice a call: a third
of a replay with queues went to ranking them anew.) A waiting job's
queue depends on its own view and the time only, and the order inside
a queue is total, so a part's queues are the followed ones filtered.

State: the last pending tuple and its views by id, each queue's jobs and
their sort keys, a heap of starvation instants, and a heap of what
`steady_until` reports for waiting jobs (`since + factor * service`).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from itertools import compress
from operator import attrgetter

from schedulearn.core.policies.kept_backlog import changed_middle
from schedulearn.core.views import JobView

_INF = float("inf")
# Steps of one ulp from `since + factor * service` to the exact instant;
# rounding puts it within a few, so more means a value it should not cache.
_MAX_STEPS = 64
_ARRIVAL = attrgetter("submitted_at", "id")


def _first_starving(since: float, limit: float) -> float | None:
    """The least float `now` with `now - since > limit` (inf: never); None
    when it cannot be found exactly (non-finite inputs)."""
    if not (math.isfinite(since) and math.isfinite(limit)):
        return None
    guess = since + limit
    if not math.isfinite(guess):
        return None
    if guess - since > limit:
        for _ in range(_MAX_STEPS):
            before = math.nextafter(guess, -_INF)
            if not before - since > limit:
                return guess
            guess = before
        return None
    for _ in range(_MAX_STEPS):
        guess = math.nextafter(guess, _INF)
        if guess - since > limit:
            return guess
    return None


class WaitingQueues:
    """Tiresias's waiting jobs per queue, kept across passes; see the module doc."""

    __slots__ = (
        "_built",
        "_factor",
        "_first",
        "_flips",
        "_jobs",
        "_keys",
        "_now",
        "_pending",
        "_seq",
        "_steady",
        "_thresholds",
        "_views",
        "_where",
    )

    def __init__(self, thresholds: list[float], starvation_factor: float) -> None:
        if not thresholds:
            raise ValueError("WaitingQueues: one threshold at least (one queue needs no ranking)")
        self._thresholds = thresholds
        self._first = thresholds[0]
        self._factor = starvation_factor
        self._reset()

    def _reset(self) -> None:
        self._now = -_INF
        self._pending: tuple[JobView, ...] | None = None
        self._views: dict[int, JobView] = {}
        # Whether the queues below hold `_views` (else only `_views` is known).
        self._built = False
        self._where: dict[int, int] = {}  # id(view) -> its queue
        queues = len(self._thresholds) + 1
        self._keys: list[list[tuple[float, int]]] = [[] for _ in range(queues)]
        self._jobs: list[list[JobView]] = [[] for _ in range(queues)]
        # (instant it starves, seq, view) of jobs in a queue below 0.
        self._flips: list[tuple[float, int, JobView]] = []
        # (since + factor * service, seq, instant it starves, view) of waiting
        # jobs that ran before and did not starve when they joined.
        self._steady: list[tuple[float, int, float, JobView]] = []
        self._seq = 0

    # --- answers -----------------------------------------------------------

    def queues(self, pending: tuple[JobView, ...], now: float) -> list[list[JobView]] | None:
        """Per queue (0 first), its waiting jobs in arrival order; None when
        the cache cannot say (the caller ranks them itself)."""
        if (
            pending is not self._pending
            and self._built
            and 4 * len(pending) < 3 * len(self._views)
            and now >= self._now
        ):
            # Clearly a part of what it follows (the fair-share layer asks about
            # one queue's jobs, or some queues'): filtered, not followed, so
            # that the next whole snapshot is still a few changes away.
            part = self._part(pending, now)
            if part is not None:
                return part
        if not self._update(pending, now):
            return None
        return [list(jobs) for jobs in self._jobs]

    def _part(self, pending: tuple[JobView, ...], now: float) -> list[list[JobView]] | None:
        """The queues of `pending`, from those of the views it follows (brought
        to `now`) and a few views besides, each ranked; None when it cannot say.

        A waiting job's queue depends on its view and the time only, and
        the order inside a queue is total, so the jobs of `pending` keep
        their places; object identity tells views apart, as `_follow`'s.
        """
        last = self._pending
        if last is None or not self._update(last, now):
            return None
        given = dict(zip(map(id, pending), pending, strict=True))
        if len(given) != len(pending):
            return None  # one view twice: `_update` ranks directly
        new = given.keys() - self._views.keys()
        if len(new) > len(pending) // 4 + 16:
            return None
        mine = given.__contains__
        out = [list(compress(jobs, map(mine, map(id, jobs)))) for jobs in self._jobs]
        for key in new:
            view = given[key]
            queue = self._queue_now(view, now)
            if queue is None:
                return None
            insort(out[queue], view, key=_ARRIVAL)
        return out

    def _queue_now(self, view: JobView, now: float) -> int | None:
        """`view`'s queue at `now` (`_add`'s rule); None when it cannot say exactly."""
        attained = view.attained_gpu_seconds
        if attained < self._first:
            return 0
        queue = bisect_right(self._thresholds, attained)
        factor, service = self._factor, view.service_seconds
        if factor > 0 and service > 0:
            queued = view.queued_at
            since = view.submitted_at if queued is None else queued
            flip = _first_starving(since, factor * service)
            if flip is None:
                return None
            if now >= flip:
                return 0  # starving
        return queue

    def next_starving(self, pending: tuple[JobView, ...], now: float) -> float | None:
        """The least `since + factor * service` over waiting jobs that ran and
        do not starve at `now` (inf: none), as `steady_until` reads it; None
        when the cache cannot say."""
        if not self._update(pending, now):
            return None
        steady, views = self._steady, self._views
        while steady:
            value, _, flip, view = steady[0]
            if now < flip and views.get(id(view)) is view:
                return value
            heapq.heappop(steady)
        return _INF

    # --- keeping it current ------------------------------------------------

    def _update(self, pending: tuple[JobView, ...], now: float) -> bool:
        if now < self._now:
            self._reset()  # time went back: nothing known holds
        self._now = now
        if pending is not self._pending and not self._follow(pending, now):
            return False
        if not self._built:
            return False  # only the views are known (`_follow`)
        flips, views = self._flips, self._views
        while flips and flips[0][0] <= now:
            _, _, view = heapq.heappop(flips)
            key = id(view)
            if views.get(key) is view and self._where[key] != 0:
                self._remove(view)
                self._place(view, 0)
        return True

    def _follow(self, pending: tuple[JobView, ...], now: float) -> bool:
        """Bring the queues to `pending`; False when the caller should rank directly."""
        last = self._pending
        if self._built and last is not None:
            # A host that keeps its views (the simulator) changes a few jobs a
            # pass: the same views at both ends are skipped, compared by
            # identity in C, and only the part between them is looked at.
            was, now_in = changed_middle(last, pending)
            if len(was) + len(now_in) <= len(pending) // 2 + 16:
                return self._apply(was, now_in, pending, now)
        current = dict(zip(map(id, pending), pending, strict=True))
        if len(current) != len(pending):
            self._reset()
            return False  # one view twice: rank directly
        known = self._views
        gone = known.keys() - current.keys()
        new = current.keys() - known.keys()
        if len(gone) + len(new) > len(pending) // 2 + 16:
            # Most views are new (a host that rebuilds them every pass, or the
            # first pass): rank directly, and build when the next snapshot
            # shares most of these.
            self._reset()
            self._now, self._views, self._pending = now, current, pending
            return False
        if self._built:
            return self._apply(
                {k: known[k] for k in gone}, {k: current[k] for k in new}, pending, now
            )
        self._views = current
        for view in pending:
            if not self._add(view, now, sort=False):
                self._reset()
                return False
        for queue, jobs in enumerate(self._jobs):
            jobs.sort(key=_ARRIVAL)
            self._keys[queue] = list(map(_ARRIVAL, jobs))
        self._built = True
        self._pending = pending
        return True

    def _apply(
        self,
        was: dict[int, JobView],
        now_in: dict[int, JobView],
        pending: tuple[JobView, ...],
        now: float,
    ) -> bool:
        """The views in `was` left and those in `now_in` joined (a view in both stayed)."""
        views = self._views
        for key, view in was.items():
            if key not in now_in:
                self._remove(view)
                del views[key]
        for key, view in now_in.items():
            if key in was:
                continue
            if key in views or not self._add(view, now, sort=True):
                self._reset()  # one view twice, or one it cannot place: rank directly
                return False
            views[key] = view
        self._pending = pending
        self._compact()
        return True

    def _add(self, view: JobView, now: float, sort: bool) -> bool:
        attained = view.attained_gpu_seconds
        queue = 0 if attained < self._first else bisect_right(self._thresholds, attained)
        factor, service = self._factor, view.service_seconds
        if factor > 0 and service > 0:
            queued = view.queued_at
            since = view.submitted_at if queued is None else queued
            limit = factor * service
            flip = _first_starving(since, limit)
            if flip is None:
                return False
            if now < flip:
                self._seq += 1
                heapq.heappush(self._steady, (since + limit, self._seq, flip, view))
                if queue:
                    heapq.heappush(self._flips, (flip, self._seq, view))
            else:
                queue = 0  # starving: queue 0
        if sort:
            self._place(view, queue)
        else:  # a whole build: sorted once at the end
            self._jobs[queue].append(view)
            self._where[id(view)] = queue
        return True

    def _place(self, view: JobView, queue: int) -> None:
        key = (view.submitted_at, view.id)
        keys = self._keys[queue]
        at = bisect_right(keys, key)
        keys.insert(at, key)
        self._jobs[queue].insert(at, view)
        self._where[id(view)] = queue

    def _remove(self, view: JobView) -> None:
        queue = self._where.pop(id(view))
        keys, jobs = self._keys[queue], self._jobs[queue]
        at = bisect_left(keys, (view.submitted_at, view.id))
        if at >= len(jobs) or jobs[at] is not view:
            at = next(i for i, job in enumerate(jobs) if job is view)
        del keys[at]
        del jobs[at]

    def _compact(self) -> None:
        """Drop heap entries of views that left, once they outnumber the live ones."""
        views = self._views
        bound = 2 * len(views) + 64
        if len(self._flips) > bound:
            self._flips = [e for e in self._flips if views.get(id(e[2])) is e[2]]
            heapq.heapify(self._flips)
        if len(self._steady) > bound:
            self._steady = [e for e in self._steady if views.get(id(e[3])) is e[3]]
            heapq.heapify(self._steady)
