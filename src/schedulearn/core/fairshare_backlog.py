"""The waiting jobs grouped by queue, kept in step with the host's pending tuple.

`Backlog` is held by `fairshare_book.ShareBook`. It answers, for the
pending tuple of the pass at hand, each queue's pending jobs in the
tuple's order (`by_queue`; its keys in the order of each queue's first
job once `in_order`), the GPUs they ask for (`waiting`), the jobs by id
(`by_id`), and the jobs of a set of queues (`select`, for the last few
sets asked: the inner policy's entitled turn asks for the same set pass
after pass).

On a backlogged cluster the tuple holds thousands of jobs, but from one
pass to the next a host changes a few: jobs start, arrive, or are
preempted back. Regrouping the whole tuple in Python each time cost more
than the rest of the layer (fifo, 3,000 Philly jobs on 8x8 with queues:
18 of 66 s in a profile). So a new tuple is walked against the last one
(`_diff`): runs of the same objects are skipped by identity in C, and
at each difference the new job is one that came (an object the backlog
does not hold) or else the old one went. Only the jobs that came or went
are then placed in or taken out of their queue's list (and the kept
sets'), next to the nearest job of the list before it, found by a scan in
C from its place backwards. When the jobs
kept are not in the same order, or most of the tuple changed (a host
that rebuilds every view, as the live scheduler does), it regroups from
scratch. Either way the answer is exactly a fresh grouping's
(tests/unit/core/test_fairshare_backlog.py).

Identity is safe: the backlog holds the last tuple's jobs, so no new
object can have the `id()` of one of them while they are compared.

With a rule for brief jobs (`Backlog(brief=...)`, `fairshare_book.ShareBook`
gives it one for its `min_run`), the backlog also keeps the brief ones by
queue and size (`brief`), followed like the lists: a turn asks whether a
brief job of its queues waits (`fairshare_state.PassState.stranded_waits`),
which a sweep of the waiting jobs answered at 17% of a replay with queues
(tiresias, 3,000 Philly jobs on 8x8). A waiting job that has never been
started is brief or not for good (its expected time left does not move
while it waits); one whose answer moves with time (`brief` answers None)
is kept apart (`timed`) and asked again each time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress, count, islice, repeat
from operator import attrgetter, is_, is_not

from schedulearn.core.views import JobView

_ID = attrgetter("id")
_QUEUE = attrgetter("queue")
# Differences beyond which a new tuple is regrouped instead of followed.
_MOST_CHANGES = 64
# Sets of queues whose jobs are kept (`Backlog.select`).
_MOST_SETS = 8


class Backlog:
    """The pending jobs of the last tuple seen, by queue (module doc)."""

    __slots__ = (
        "_brief_rule",
        "_by_id",
        "_by_id_of",
        "_chosen",
        "_known",
        "_ordered",
        "brief",
        "by_queue",
        "jobs",
        "timed",
        "waiting",
    )

    def __init__(self, brief: Callable[[JobView], bool | None] | None = None) -> None:
        self.jobs: tuple[JobView, ...] = ()
        # queue -> its jobs in `jobs` order; queue -> GPUs they ask for. The
        # queues in the order of their first jobs when `_ordered` (`in_order`).
        self.by_queue: dict[str, list[JobView]] = {}
        self.waiting: dict[str, int] = {}
        self._ordered = True
        # A set of queues -> [its jobs in `jobs` order, that as a tuple or None]
        # (`select`).
        self._chosen: dict[frozenset[str], _Chosen] = {}
        # id(job) -> job, for every job of `jobs`.
        self._known: dict[int, JobView] = {}
        # The jobs by `JobView.id`, and the tuple they index (built when asked).
        self._by_id: dict[int, JobView] = {}
        self._by_id_of: tuple[JobView, ...] | None = None
        # With a rule for brief jobs (module doc): queue -> GPUs asked -> id(job)
        # -> job, each brief job of `jobs`; and id(job) -> job, those whose
        # answer moves with time.
        self._brief_rule = brief
        self.brief: dict[str, dict[int, dict[int, JobView]]] = {}
        self.timed: dict[int, JobView] = {}

    def update(self, jobs: tuple[JobView, ...]) -> list[JobView] | None:
        """Make the backlog `jobs`' (grouped by `JobView.queue` as it is); the
        jobs that came since the last tuple, or None if it regrouped them all."""
        if jobs is self.jobs:
            return []
        diff = _diff(self.jobs, jobs, self._known) if self._known else None
        if diff is None:
            self._regroup(jobs)
            self.jobs = jobs
            return None
        self._follow(jobs, *diff)
        self.jobs = jobs
        return [job for _, job in diff[1]]

    def by_id(self) -> dict[int, JobView]:
        """The jobs by id (read-only: the backlog's own)."""
        if self._by_id_of is not self.jobs:
            jobs = self.jobs
            # map(attrgetter) and zip sweep at C speed.
            self._by_id = dict(zip(map(_ID, jobs), jobs, strict=True))
            self._by_id_of = jobs
        return self._by_id

    def _regroup(self, jobs: tuple[JobView, ...]) -> None:
        by_queue: dict[str, list[JobView]] = {}
        waiting: dict[str, int] = {}
        for job in jobs:
            name = job.queue
            mine = by_queue.get(name)
            if mine is None:
                mine = by_queue[name] = []
                waiting[name] = 0
            mine.append(job)
            waiting[name] += job.gpus
        self.by_queue, self.waiting = by_queue, waiting
        self._ordered = True
        self._chosen = {}
        if self._brief_rule is not None:
            self.brief, self.timed = {}, {}
            self._index(jobs)
        known = dict(zip(map(id, jobs), jobs, strict=True))
        # One object twice (not followed: `_diff` needs each job once).
        self._known = known if len(known) == len(jobs) else {}

    def select(self, queues: frozenset[str]) -> tuple[JobView, ...]:
        """The jobs of `queues`, in `jobs` order: kept for the last few sets asked
        (a turn asks this of the same queues pass after pass) and followed
        like the queues' lists."""
        kept = self._chosen.get(queues)
        if kept is None:
            jobs = self.jobs
            kept = _Chosen(list(compress(jobs, map(queues.__contains__, map(_QUEUE, jobs)))))
            if len(self._chosen) >= _MOST_SETS:
                del self._chosen[next(iter(self._chosen))]  # the oldest
            self._chosen[queues] = kept
        if kept.given is None:
            kept.given = tuple(kept.jobs)
        return kept.given

    def in_order(self) -> None:
        """List the queues (`by_queue`, `waiting`) as a fresh grouping does: in
        the order of their first jobs. Followed, they may not be; only the book
        of queues no host declared depends on it (`fairshare_queues.book`),
        so it is asked for then: one scan in C up to the last first job."""
        if self._ordered:
            return
        by_queue, jobs = self.by_queue, self.jobs
        first = {id(js[0]): q for q, js in by_queue.items()}
        hits = compress(map(id, jobs), map(first.__contains__, map(id, jobs)))
        order = [first[i] for i in islice(hits, len(first))]
        if order != list(by_queue):
            waiting = self.waiting
            self.by_queue = {q: by_queue[q] for q in order}
            self.waiting = {q: waiting[q] for q in order}
        self._ordered = True

    def _follow(
        self, jobs: tuple[JobView, ...], gone: list[JobView], came: list[tuple[int, JobView]]
    ) -> None:
        """Take the jobs that went out of their queues' lists (and the sets'
        `select`ed) and place those that came (with their places in `jobs`, in
        order) in theirs."""
        by_queue, waiting, known = self.by_queue, self.waiting, self._known
        firsts = False  # whether a queue's first job changed (the keys' order)
        for job in gone:
            name = job.queue
            mine = by_queue[name]
            firsts = _take(mine, job) == 0 or firsts
            waiting[name] -= job.gpus
            del known[id(job)]
            if not mine:
                del by_queue[name], waiting[name]
        for place, job in came:
            name = job.queue
            known[id(job)] = job
            listed = by_queue.get(name)
            if listed is None:
                by_queue[name] = [job]
                waiting[name] = job.gpus
                firsts = True
                continue
            waiting[name] += job.gpus
            firsts = _put(listed, job, jobs, place, name.__eq__) == 0 or firsts
        for queues, kept in self._chosen.items():
            mine, touched = kept.jobs, False
            for job in gone:
                if job.queue in queues:
                    _take(mine, job)
                    touched = True
            for place, job in came:
                if job.queue in queues:
                    _put(mine, job, jobs, place, queues.__contains__)
                    touched = True
            if touched:
                kept.given = None
        if firsts:
            self._ordered = False
        if self._brief_rule is not None:
            self._unindex(gone)
            self._index(job for _, job in came)
        by_id = self._by_id
        if self._by_id_of is self.jobs and len(by_id) == len(self.jobs):
            # Indexed, one job an id: follow it too (the pass only looks jobs up).
            for job in gone:
                del by_id[job.id]
            for _, job in came:
                by_id[job.id] = job
            # Two jobs with one id: indexed afresh when asked.
            self._by_id_of = jobs if len(by_id) == len(jobs) else None

    def _index(self, jobs: Iterable[JobView]) -> None:
        """Keep those of `jobs` the rule calls brief (or whose answer moves)."""
        rule, brief, timed = self._brief_rule, self.brief, self.timed
        assert rule is not None
        for job in jobs:
            answer = rule(job)
            if answer is None:
                timed[id(job)] = job
            elif answer:
                sizes = brief.get(job.queue)
                if sizes is None:
                    sizes = brief[job.queue] = {}
                mine = sizes.get(job.gpus)
                if mine is None:
                    mine = sizes[job.gpus] = {}
                mine[id(job)] = job

    def _unindex(self, jobs: Iterable[JobView]) -> None:
        """Forget those of `jobs` (that went) that `_index` kept."""
        brief, timed = self.brief, self.timed
        for job in jobs:
            if timed.pop(id(job), None) is not None:
                continue
            sizes = brief.get(job.queue)
            if sizes is None:
                continue
            mine = sizes.get(job.gpus)
            if mine is None or mine.pop(id(job), None) is None:
                continue
            if not mine:
                del sizes[job.gpus]
                if not sizes:
                    del brief[job.queue]


class _Chosen:
    """The jobs of a set of queues (`Backlog.select`), and as last handed out."""

    __slots__ = ("given", "jobs")

    def __init__(self, jobs: list[JobView]) -> None:
        self.jobs = jobs
        self.given: tuple[JobView, ...] | None = None


def _take(mine: list[JobView], job: JobView) -> int:
    """Take `job` (that object) out of `mine`; where it was."""
    at = next(compress(count(), map(is_, mine, repeat(job))))
    del mine[at]
    return at


def _put(
    mine: list[JobView],
    job: JobView,
    jobs: tuple[JobView, ...],
    place: int,
    member: Callable[[str], bool],
) -> int:
    """Place `job`, at `place` in `jobs`, in `mine` (the jobs of `jobs` whose queue
    is a `member`, in order, every one before `place` in it already): after the
    nearest member before it, scanned for in C from the end. Where it went."""
    back = next(compress(count(), map(member, map(_QUEUE, _before(jobs, place)))), None)
    if back is None:
        mine.insert(0, job)
        return 0
    previous = jobs[place - 1 - back]
    at = len(mine) - next(compress(count(), map(is_, reversed(mine), repeat(previous))))
    mine.insert(at, job)
    return at


def _diff(
    old: tuple[JobView, ...], new: tuple[JobView, ...], known: dict[int, JobView]
) -> tuple[list[JobView], list[tuple[int, JobView]]] | None:
    """The jobs of `old` that went and those of `new` that came (with their
    places), if `new` keeps the rest of `old` in its order and few changed;
    else None. `known` is `old` by `id()`, each job once."""
    gone: list[JobView] = []
    came: list[tuple[int, JobView]] = []
    i = j = 0
    n_old, n_new = len(old), len(new)
    while i < n_old and j < n_new:
        # The run of the same objects from here, compared in C.
        same = map(is_not, islice(old, i, None), islice(new, j, None))
        run = next(compress(count(), same), min(n_old - i, n_new - j))
        i += run
        j += run
        if i >= n_old or j >= n_new:
            break
        job = new[j]
        if id(job) not in known:
            came.append((j, job))
            j += 1
        else:  # a job kept comes next: the old one went (checked below if not)
            gone.append(old[i])
            i += 1
        if len(gone) + len(came) > _MOST_CHANGES:
            return None
    if len(gone) + len(came) + (n_old - i) + (n_new - j) > _MOST_CHANGES:
        return None
    gone.extend(old[i:])
    came.extend(zip(range(j, n_new), new[j:], strict=True))
    # Every job that came must be new, and new once; then the jobs kept are
    # exactly the pairs the runs matched, in both orders.
    ids = {id(job) for _, job in came}
    if len(ids) != len(came) or any(i in known for i in ids):
        return None
    return gone, came


def _before(jobs: tuple[JobView, ...], place: int) -> islice[JobView]:
    """`jobs[:place]` from the end, without copying."""
    return islice(reversed(jobs), len(jobs) - place, None)
