"""The fair-share layer's book between passes: each queue's GPUs in use and waiting.

`ShareBook` is held by one `core.fairshare.FairShare` and answers what
`fairshare_queues.named` and `fairshare_queues.sweep` answer (the view
with jobs that name no queue in the default queue; each queue's
`QueueShare` and its pending jobs by queue) for the pass at hand,
recounting the running jobs only when the snapshot's running jobs
changed and regrouping the pending jobs only when those changed. A host
that keeps its job tuples while nothing changes (the simulator; a tick
of a policy with `tick_seconds`) then pays for the counts once per
change, not once per pass. The shares themselves (`fill`) follow usage,
which moves with time, so they are filled afresh each pass (a few
queues: cheap). Only counts are kept, so the layer still decides from
the snapshot alone.

On a backlogged cluster the snapshot holds thousands of pending jobs,
and each sweep of them costs about as much as a whole pass of a plain
policy that looks only at the head of the queue. So the book keeps the
pending jobs up to date incrementally: its `Backlog`
(`fairshare_backlog`) follows each new tuple by what came and went
since the last one, and only the jobs that came are checked for naming
no queue (all of them after a regrouping; only then is the tuple
rebuilt, as `named` does, each such job's copy kept while it waits, so
that the rebuilt tuples share their jobs). The jobs by id, and the
jobs of a set of queues a turn asks for (`select`), follow the backlog
too, and with a `min_run` the brief ones (`Backlog.brief`, `brief_waiting`).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from itertools import compress
from operator import attrgetter

from schedulearn.core.fairshare_backlog import Backlog
from schedulearn.core.fairshare_queues import (
    DEFAULT_QUEUE,
    Held,
    QueueShare,
    Tenancy,
    book,
    held_by_queue,
)
from schedulearn.core.views import ClusterView, JobView, rebuild

# `fairshare_state.EPS` (that module imports this one).
EPS = 1e-9
_QUEUE = attrgetter("queue")


class ShareBook:
    """Counts per queue, kept while the snapshot's job tuples stay the same."""

    __slots__ = (
        "_backlog",
        "_fixed",
        "_held",
        "_held_ordered",
        "_jobs_held",
        "_min_run",
        "_pending",
        "_raw_pending",
        "_raw_running",
        "_running",
        "_running_ids",
    )

    def __init__(self, min_run: float | None = None) -> None:
        # The host's tuples last seen, and the same with every job in a queue
        # (the very same tuples when every job names one).
        self._raw_pending: tuple[JobView, ...] | None = None
        self._pending: tuple[JobView, ...] = ()
        self._raw_running: tuple[JobView, ...] | None = None
        self._running: tuple[JobView, ...] = ()
        # queue -> what its running jobs hold, followed from tuple to tuple
        # (`_name_running`): the jobs of `_raw_running` by id(), and how many
        # each queue runs; whether `_held`'s keys are in the order of each
        # queue's first running job, as a fresh count (`held_by_queue`) has them.
        self._held: dict[str, Held] = {}
        self._running_ids: dict[int, JobView] | None = None
        self._jobs_held: dict[str, int] = {}
        self._held_ordered = True
        # The pending jobs by queue (those of `_pending`), and with `min_run` the
        # brief ones (`brief_waiting`).
        self._min_run = min_run
        rule = None if min_run is None else partial(brief_waiting, min_run=min_run)
        self._backlog = Backlog(rule)
        # id() of a pending job that names no queue -> (it, its copy in the
        # default queue): the same copy while it waits (`_fix_pending`).
        self._fixed: dict[int, tuple[JobView, JobView]] = {}

    def named(self, view: ClusterView) -> ClusterView:
        """`fairshare_queues.named(view)`, from the book's sweeps of the job tuples."""
        pending = self._name_pending(view.pending)
        running = self._name_running(view.running)
        if pending is view.pending and running is view.running:
            return view
        return replace(view, pending=pending, running=running)

    def shares(
        self, view: ClusterView, tenancy: Tenancy, capacity: int | None = None
    ) -> tuple[dict[str, QueueShare], dict[str, list[JobView]]]:
        """Every queue's share for this pass, and its pending jobs in the view's order.

        `view` is a named one (`named`): every job names its queue.
        """
        if view.running is not self._running:
            self._name_running(view.running)
        if view.pending is not self._pending:
            self._name_pending(view.pending)
        backlog = self._backlog
        held, declared = self._held, tenancy.by_name
        if not self._held_ordered and any(q not in declared for q in held):
            # `book` adds queues no host declared in the order of `held`.
            self._recount(self._running)
            held = self._held
        if any(q not in declared and q not in held for q in backlog.waiting):
            backlog.in_order()  # `book` adds such queues in the order of `waiting`
        out = book(view, tenancy, held, backlog.waiting, capacity)
        # The pass reads the lists and never changes them: shared, not copied.
        return out, backlog.by_queue

    def pending_by_id(self) -> dict[int, JobView]:
        """The pending jobs of the last `shares` by id (read-only: the book's own)."""
        return self._backlog.by_id()

    def brief_of(self, pending: tuple[JobView, ...], min_run: float) -> Backlog | None:
        """The backlog, whose `brief` and `timed` keep `pending`'s brief jobs for
        `min_run` (`brief_waiting`), when it follows that tuple; else None."""
        backlog = self._backlog
        if self._min_run != min_run or pending is not backlog.jobs:
            return None
        return backlog

    def select(self, pending: tuple[JobView, ...], queues: set[str]) -> tuple[JobView, ...]:
        """The jobs of `pending` in `queues`, in its order (kept across passes for
        the last `shares`' tuple: `Backlog.select`)."""
        backlog = self._backlog
        if pending is backlog.jobs:
            return backlog.select(frozenset(queues))
        return tuple(compress(pending, map(queues.__contains__, map(_QUEUE, pending))))

    def _name_pending(self, raw: tuple[JobView, ...]) -> tuple[JobView, ...]:
        if raw is self._raw_pending or raw is self._pending:
            return self._pending
        backlog = self._backlog
        if self._raw_pending is self._pending:
            # The last tuple named every job's queue: so does this one if the
            # jobs that came do (the backlog groups by `JobView.queue` as it is,
            # and regroups the jobs fixed below if not).
            came = backlog.update(raw)
            if all(map(_QUEUE, raw if came is None else came)):
                self._raw_pending = self._pending = raw
                return raw
        jobs = raw if all(map(_QUEUE, raw)) else self._fix_pending(raw)
        backlog.update(jobs)
        self._raw_pending, self._pending = raw, jobs
        return jobs

    def _fix_pending(self, raw: tuple[JobView, ...]) -> tuple[JobView, ...]:
        """`_fix(raw)`, each job's copy the same object while the job waits."""
        fixed = self._fixed
        out: list[JobView] = []
        for j in raw:
            if j.queue:
                out.append(j)
                continue
            kept = fixed.get(id(j))
            if kept is None or kept[0] is not j:
                kept = fixed[id(j)] = (j, rebuild(j, queue=DEFAULT_QUEUE))
            out.append(kept[1])
        if len(fixed) > 2 * len(raw) + 64:  # forget jobs that left the queue
            here = set(map(id, raw))
            for i in [i for i in fixed if i not in here]:
                del fixed[i]
        return tuple(out)

    def _name_running(self, raw: tuple[JobView, ...]) -> tuple[JobView, ...]:
        """`raw` with each job in a queue, and `_held` counted for it: only the
        jobs that came and went since the last tuple (found by identity, in C),
        unless most changed (a host that rebuilds its views)."""
        if raw is self._raw_running or raw is self._running:
            return self._running
        jobs = raw if all(map(_QUEUE, raw)) else _fix(raw)
        ids = dict(zip(map(id, raw), raw, strict=True))
        old = self._running_ids
        if old is None or len(ids) != len(raw):
            self._recount(jobs)
        else:
            came = ids.keys() - old.keys()
            gone = old.keys() - ids.keys()
            if len(came) + len(gone) > len(raw) // 2 + 8:
                self._recount(jobs)
            elif came or gone:
                for i in gone:
                    self._count(old[i], -1)
                for i in came:
                    self._count(ids[i], 1)
                self._held_ordered = False
        # One object twice: counted afresh each time (identity cannot follow it).
        self._running_ids = ids if len(ids) == len(raw) else None
        self._raw_running, self._running = raw, jobs
        return jobs

    def _recount(self, jobs: tuple[JobView, ...]) -> None:
        """`_held` afresh (`held_by_queue`), in the order of each queue's first job."""
        self._held = held_by_queue(jobs)
        counted: dict[str, int] = {}
        for job in jobs:
            counted[job.queue] = counted.get(job.queue, 0) + 1
        self._jobs_held = counted
        self._held_ordered = True

    def _count(self, job: JobView, sign: int) -> None:
        """Add (`sign` 1) or take out (-1) running `job` in `_held` (`held_by_queue`'s sums)."""
        name = job.queue or DEFAULT_QUEUE
        held, counted = self._held, self._jobs_held
        mine = held.get(name)
        if mine is None:
            mine = held[name] = Held(0, 0, {})
        n = sign * job.allocated_gpus
        mine.used += n
        if not job.preemptible:
            mine.pinned += n
        mine.by_size[job.gpus] = mine.by_size.get(job.gpus, 0) + n
        left = counted.get(name, 0) + sign
        if left:
            counted[name] = left
        else:  # a fresh count has no queue without running jobs
            del held[name], counted[name]


def brief_waiting(job: JobView, min_run: float) -> bool | None:
    """Is waiting `job` expected to end within `min_run` (`PassState.brief`), for
    as long as it waits? None when the answer moves with time (a view that
    says it runs: `JobView.started_at`)."""
    if job.started_at is not None:
        return None
    # `JobView.remaining_at` of a job not running: no time accrues.
    expected = job.expected_duration
    return expected is not None and max(0.0, expected - job.service_seconds) <= min_run + EPS


def _fix(jobs: tuple[JobView, ...]) -> tuple[JobView, ...]:
    """`jobs` with those that name no queue in the default queue (`named`)."""
    return tuple(j if j.queue else rebuild(j, queue=DEFAULT_QUEUE) for j in jobs)
