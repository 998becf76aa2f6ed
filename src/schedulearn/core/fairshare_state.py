"""One fair-share pass's bookkeeping: the free GPUs, each queue's share, what is decided.

`PassState` owns the mutable state of one pass of `core.fairshare.FairShare`
(see that module's doc for the rule): the free pool and the node views
kept in step with it, each queue's share (`QueueShare.used`, `pinned`),
the running jobs as the pass leaves them, the jobs it has decided on,
and the decisions. Every step of the pass checks a step's decisions
before it records them (`fairshare_pass`, `fairshare_reclaim`), so
nothing is ever undone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from itertools import compress, count, islice
from operator import attrgetter, not_

from schedulearn.core.decisions import Decision, Preempt, Start
from schedulearn.core.fairshare_backlog import Backlog
from schedulearn.core.fairshare_book import ShareBook
from schedulearn.core.fairshare_fill import still_ahead, stranded
from schedulearn.core.fairshare_queues import QueueShare, Tenancy
from schedulearn.core.placement import FreePool
from schedulearn.core.policy import Policy
from schedulearn.core.views import ClusterView, GpuView, JobView, Placement, rebuild

# Tolerance for comparing GPU counts with fractional shares.
EPS = 1e-9
# A queue ahead on its share of GPU-time lends its jobs only while it would
# stay ahead this many times `min_run` without them (`PassState.lends`).
LEND_FOR = 4.0
_ID = attrgetter("id")


class PassState:
    """One pass: the pool, each queue's share, the running jobs and the decisions so far."""

    def __init__(
        self,
        inner: Policy,
        min_run: float,
        view: ClusterView,
        tenancy: Tenancy,
        pinned: dict[int, tuple[JobView, JobView]],
        book: ShareBook,
    ) -> None:
        # Decayed usage, read once: a host's live mapping settles on every read.
        served = None if tenancy.served is None else dict(tenancy.served)
        owed = None if tenancy.owed is None else dict(tenancy.owed)
        tenancy = Tenancy(tenancy.queues, dict(tenancy.usage), tenancy.half_life, served, owed)
        self.inner = inner
        self.min_run = min_run
        self.view = view
        self.tenancy = tenancy
        # The healthy GPUs (`ClusterView.total_gpus`), summed once: asked often.
        self.capacity = view.total_gpus
        # Each queue's share, and its pending jobs in arrival order.
        self.book, self.by_queue = book.shares(view, tenancy, self.capacity)
        self.pool = FreePool(view)
        self.free = self.pool.total_free()
        self.nodes = list(view.nodes)
        self.counts = list(view.free_counts) if view.free_counts is not None else None
        self.index = {n.name: i for i, n in enumerate(view.nodes)}
        self._shelf = book
        self.running: dict[int, JobView] = {j.id: j for j in view.running}
        # Jobs this pass has decided on (started, preempted, resized): a job
        # appears once in a pass.
        self.decided: set[int] = set()
        self.decisions: list[Decision] = []
        # Idle GPUs queues below their guarantee wait for (`fairshare_pass`).
        self.need: dict[str, int] = {}
        # Non-preemptible copies of running jobs a turn may not preempt, by
        # id (the layer keeps this between passes: the same views recur).
        self.pinned = pinned
        # `lends`: each queue's fitting GPUs, and its answers, while the book
        # stays as it is (`moved`).
        self._busy: dict[str, int] | None = None
        self._lent: dict[tuple[str, int], bool] = {}
        # The running jobs the last turn was shown, and what they depended on
        # (`_turn_running`).
        self._turn_seen: tuple[tuple[int, bool, bool], tuple[JobView, ...]] | None = None
        # GPUs each queue is owed now (`QueueShare.owing`), as the pass found
        # them: starts and stops move GPUs between waiting and running only.
        self.owing: dict[str, int] | None = None
        if owed is not None:
            by_queue = self.by_queue
            self.owing = {s.name: s.owing(by_queue.get(s.name, ())) for s in self.book.values()}

    @cached_property
    def pending(self) -> dict[int, JobView]:
        """The pending jobs by id, read-only: the book's own (`ShareBook.pending_by_id`),
        indexed when first asked (most passes propose nothing)."""
        return self._shelf.pending_by_id()

    # --- queues and their jobs ---------------------------------------------

    def under_share(self, s: QueueShare) -> bool:
        """Below its deserved share: its next job goes before other queues' jobs."""
        return s.used < s.share - EPS

    def waiting(self, queues: set[str] | None = None) -> tuple[JobView, ...]:
        """Pending jobs not yet decided on (of `queues` only, if given), in arrival order.

        Selected in C (`ShareBook.select`, `_undecided`): a turn asks this of
        a backlog of thousands, every pass.
        """
        decided = self.decided
        pending = self.view.pending
        if queues is not None and len(queues) == 1:
            (name,) = queues
            jobs: Sequence[JobView] = self.by_queue.get(name, ())
        elif queues is None or len(queues) == len(self.by_queue):
            jobs = pending
        else:
            jobs = self._shelf.select(pending, queues)
        if not decided:
            return jobs if isinstance(jobs, tuple) else tuple(jobs)
        return _undecided(jobs, decided, self.pending, len(pending))

    def sub_view(
        self,
        pending: tuple[JobView, ...],
        turn: bool = False,
        queues: set[str] | None = None,
    ) -> ClusterView:
        """The whole cluster as the pass has left it, with `pending` waiting.

        For an inner policy's turn (`turn`) a running job it may not
        preempt (`may_preempt`) is shown as non-preemptible, so that the
        inner policy plans with what it may really do instead of making
        room the layer then refuses. `queues`, if given, says that `pending`
        is `waiting(queues)` (the brief jobs among them are then looked up,
        not swept: `stranded_waits`).
        """
        view = self.view
        decided = self.decided
        if not turn:
            running = tuple(j for j in self.running.values() if j.id not in decided)
        else:
            running = self._turn_running(pending, queues)
        counts = tuple(self.counts) if self.counts is not None else None
        return ClusterView(
            view.now, tuple(self.nodes), pending, running, counts, view.goodput, None
        )

    def _turn_running(
        self, pending: tuple[JobView, ...], queues: set[str] | None = None
    ) -> tuple[JobView, ...]:
        """The running jobs not decided on, each the inner policy may not preempt
        as non-preemptible (`pinned_copy`): `may_preempt` written out, with
        the time bar read once (a turn asks it of every running job: 7% of
        20,000 Philly jobs on 64x8 with queues). A job a queue ahead keeps
        (`lends`) stays preemptible when a brief job waits in the turn
        (`brief`): `_accept` lets only a brief job take it. Any job that ran
        `min_run` stays preemptible when a stranded job waits (`stranded`):
        `_accept` lets only that job take it."""
        book, decided, pinned_copy = self.book, self.decided, self.pinned_copy
        now, bar = self.view.now, self.min_run - EPS  # `ran_min`: now - started >= bar
        brief_waits: bool | None = None  # asked when first needed
        stranded = self.stranded_waits(pending, queues)
        key = None
        if queues is not None:
            # The answer depends on the pending jobs only through `stranded` and
            # `brief_waits`, and on the pass through what it decided (every
            # change of the book or the running jobs is a decision): a second
            # turn with nothing decided since the first is shown the same jobs.
            brief_waits = self.brief_waits(pending, queues)
            key = (len(self.decisions), stranded, brief_waits)
            kept = self._turn_seen
            if kept is not None and kept[0] == key:
                return kept[1]
        out: list[JobView] = []
        for j in self.running.values():
            if j.id in decided:
                continue
            if j.preemptible and not j.stopping:
                owner = book[j.queue]
                if owner.pending <= 0:
                    started = j.started_at
                    ran = started is not None and now - started >= bar
                    if owner.ahead:
                        if not ran:
                            j = pinned_copy(j)
                        elif not self.lends_job(owner, j):
                            if brief_waits is None:
                                brief_waits = self.brief_waits(pending, queues)
                            if not brief_waits:
                                j = pinned_copy(j)
                    elif (
                        (
                            not owner.is_beyond(j)
                            and owner.fitting - j.allocated_gpus < owner.guaranteed
                        )
                        or not (owner.used > owner.share + EPS and ran)
                    ) and not (ran and stranded):
                        j = pinned_copy(j)
            out.append(j)
        shown = tuple(out)
        if key is not None:
            self._turn_seen = (key, shown)
        return shown

    def may_preempt(
        self, job: JobView, brief_waits: bool = False, stranded_waits: bool = False
    ) -> bool:
        """Could the inner policy's turn preempt `job` (before its group's exact check)?

        A job of a queue with waiting jobs (the inner policy reorders a
        queue's own jobs, e.g. tiresias's least attained service first), or
        of a queue over its deserved share that has run `min_run`, never
        taking that queue below its guarantee, or of a queue ahead on its
        fraction of the GPU-time (`QueueShare.ahead`) that has run `min_run`
        and that it lends (`lends_job`), or, when a brief job waits in the
        turn (`brief_waits`), that it would lend such a job (`brief`); or,
        when a stranded job waits in the turn (`stranded_waits`), of any
        queue once it has run `min_run`.
        """
        if job.stopping:
            return True  # going anyway: taking it again stops nobody new (core.preemption)
        owner = self.book[job.queue]
        if owner.pending > 0:
            return True  # its own queue's jobs (the group check keeps the queue's GPUs)
        if owner.ahead:
            return self.ran_min(job) and (brief_waits or self.lends_job(owner, job))
        if stranded_waits and self.ran_min(job):
            return True
        if not owner.is_beyond(job) and owner.fitting - job.allocated_gpus < owner.guaranteed:
            return False  # it would take the queue below its guarantee
        return owner.used > owner.share + EPS and self.ran_min(job)

    def pinned_copy(self, job: JobView) -> JobView:
        """`job` as non-preemptible, kept across passes while the job's view is the same."""
        cached = self.pinned.get(job.id)
        if cached is not None and cached[0] is job:
            return cached[1]
        copy = rebuild(job, preemptible=False)
        self.pinned[job.id] = (job, copy)
        return copy

    def brief(self, job: JobView) -> bool:
        """Is `job` expected to end within `min_run` (`JobView.remaining_at`)?

        A queue ahead lends its GPUs to such a job even where `lends` keeps
        them: the job is done before its GPUs could be taken back, so the
        lender cannot flip behind and reclaim them (what `LEND_FOR`
        prevents), and it costs the lender at most `min_run` of GPU-time.
        An estimate that is wrong buys no more: after `min_run` the job is
        a borrower like any other and a reclaim may take it.
        """
        left = job.remaining_at(self.view.now)
        return left is not None and left <= self.min_run + EPS

    def stranded(self, job: JobView) -> bool:
        """May `job` take GPUs of a queue behind (`fairshare_fill.stranded`)?"""
        return stranded(self.book[job.queue], job, self.view.now, self.min_run)

    def stranded_waits(self, pending: tuple[JobView, ...], queues: set[str] | None = None) -> bool:
        """Does a stranded job (`stranded`) wait among `pending`?

        With `queues` (`pending` is `waiting(queues)`), from the brief jobs the
        book keeps by queue and size (`ShareBook.brief_of`): a stranded job is
        a brief one that only borrows (`QueueShare.only_borrows`: of a queue
        guaranteed none, or larger than the guarantee).
        """
        backlog = self._brief_index(queues)
        if backlog is None or queues is None:
            return any(self.stranded(p) for p in pending)
        book, decided = self.book, self.decided
        brief = backlog.brief
        for name in queues:
            sizes = brief.get(name)
            if not sizes:
                continue
            own = book[name].own
            for gpus, jobs in sizes.items():
                if (own == 0 or gpus > own) and _any_undecided(jobs, decided):
                    return True
        return any(
            j.queue in queues and j.id not in decided and self.stranded(j)
            for j in backlog.timed.values()
        )

    def brief_waits(self, pending: tuple[JobView, ...], queues: set[str] | None = None) -> bool:
        """Does a brief job (`brief`) wait among `pending` (`queues`: as `stranded_waits`)?"""
        backlog = self._brief_index(queues)
        if backlog is None or queues is None:
            return any(self.brief(p) for p in pending)
        decided = self.decided
        brief = backlog.brief
        for name in queues:
            sizes = brief.get(name)
            if sizes and any(_any_undecided(jobs, decided) for jobs in sizes.values()):
                return True
        return any(
            j.queue in queues and j.id not in decided and self.brief(j)
            for j in backlog.timed.values()
        )

    def _brief_index(self, queues: set[str] | None) -> Backlog | None:
        """The book's brief jobs of this pass's pending tuple, if it keeps them."""
        if queues is None:
            return None
        return self._shelf.brief_of(self.view.pending, self.min_run)

    def lends_job(self, s: QueueShare, job: JobView) -> bool:
        """May queue `s`, ahead, give up its running `job` (`lends`)?"""
        return s.is_beyond(job) or self.lends(s, s.fitting - job.allocated_gpus)

    def lends(self, s: QueueShare, fitting: int) -> bool:
        """May queue `s`, ahead, give up GPUs of its fitting jobs down to
        `fitting`? Only while it would stay ahead `LEND_FOR` times `min_run`.

        The answer depends on every queue's fitting GPUs only (and on the
        pass's constants), so it is kept until the book moves (`moved`):
        a turn asks it of the same queues for job after job.
        """
        horizon = LEND_FOR * self.min_run
        if horizon <= 0:
            return True
        key = (s.name, fitting)
        lent = self._lent.get(key)
        if lent is not None:
            return lent
        busy = self._busy
        if busy is None:
            busy = self._busy = {q.name: q.fitting for q in self.book.values()}
        held = busy[s.name]
        busy[s.name] = fitting
        lent = still_ahead(
            s.name,
            self.book.values(),
            self.capacity,
            self.tenancy.counted,
            busy,
            self.tenancy.half_life,
            horizon,
            self.tenancy.owed,
            self.owing,
        )
        busy[s.name] = held
        self._lent[key] = lent
        return lent

    @property
    def lends_asked(self) -> tuple[tuple[str, int], ...]:
        """The (queue, fitting GPUs) that `lends` answered since the book last
        moved (`fairshare_lend.next_lend_turn` follows them)."""
        return tuple(self._lent)

    def moved(self) -> None:
        """A queue's GPUs in use changed: what `lends` kept no longer holds."""
        self._busy = None
        if self._lent:
            self._lent = {}

    def ran_min(self, job: JobView) -> bool:
        """Has `job` run `min_run` seconds (may it be taken back)?"""
        started = job.started_at
        return started is not None and self.view.now - started >= self.min_run - EPS

    # --- recording decisions -------------------------------------------------

    def start(self, job: JobView, placement: Placement) -> None:
        """Record a start whose GPUs the pool already holds for `job`."""
        s = self.book[job.queue]
        self.moved()
        s.used += placement.num_gpus
        if s.is_beyond(job):
            s.beyond += placement.num_gpus
        s.pending -= job.gpus
        if not job.preemptible:
            s.pinned += placement.num_gpus
        self.decided.add(job.id)
        self.decisions.append(Start(job.id, placement))

    def stop(self, job: JobView, reclaimed_by: str | None = None) -> None:
        """Record a preemption whose GPUs the pool already has free again."""
        s = self.book[job.queue]
        self.moved()
        s.used -= job.allocated_gpus
        if s.is_beyond(job):
            s.beyond -= job.allocated_gpus
        if not job.preemptible:
            s.pinned -= job.allocated_gpus
        self.decided.add(job.id)
        self.decisions.append(Preempt(job.id, reclaimed_by))

    # --- the pool and the node views, kept together --------------------------

    def take(self, job: JobView, placement: Placement) -> None:
        self.pool.take(job, placement)
        self.mark(placement, job.id)
        self.free -= placement.num_gpus

    def release(self, job: JobView) -> None:
        assert job.placement is not None
        self.pool.release(job)
        self.mark(job.placement, None)
        self.free += job.placement.num_gpus

    def free_in(self, placement: Placement, freed: Mapping[str, set[int]]) -> bool:
        """Are all of `placement`'s GPUs free in the pool, or in `freed` (per node)?"""
        pool = self.pool
        for name, gpus in placement:
            i = self.index.get(name)
            if i is None:
                return False
            free = pool.free_gpus(pool.nodes[i])
            also = freed.get(name, ())
            if any(g not in free and g not in also for g in gpus):
                return False
        return True

    def mark(self, placement: Placement, holder: int | None) -> None:
        """Rebuild the views of the nodes `placement` touches: its GPUs now
        belong to `holder` (None: free), CPUs and memory as the pool has them."""
        pool = self.pool
        for name, indices in placement:
            i = self.index[name]
            node = self.nodes[i]
            mine = set(indices)
            gpus = tuple(
                GpuView(g.index, g.type, g.uuid, g.memory_mb, holder)
                if g.index in mine and g.job_id != holder
                else g
                for g in node.gpus
            )
            # By name: capabilities and drained travel with the node.
            self.nodes[i] = rebuild(
                node,
                gpus=gpus,
                free_cpus=pool.free_cpus(node),
                free_memory_gb=pool.free_memory_gb(node),
            )
            if self.counts is not None:
                self.counts[i] = self.nodes[i].num_free_gpus


def _any_undecided(jobs: Mapping[int, JobView], decided: set[int]) -> bool:
    """Is one of `jobs` (by `id()`) not decided on? (Those decided are few.)"""
    return any(j.id not in decided for j in jobs.values())


def _undecided(
    jobs: Sequence[JobView], decided: set[int], pending: Mapping[int, JobView], whole: int
) -> tuple[JobView, ...]:
    """`jobs` (of the pending ones: `pending` by id, of `whole` jobs) without
    those in `decided`, a tuple as it is.

    The jobs decided on are few and, in arrival order, mostly near the head:
    found by identity in C, scanning only up to the last when all are in
    `jobs`, and cut out by slicing.
    """
    if not decided:
        return jobs if isinstance(jobs, tuple) else tuple(jobs)
    if len(pending) != whole:  # two pending jobs with one id: by id, as asked
        return tuple(compress(jobs, map(not_, map(decided.__contains__, map(_ID, jobs)))))
    objects = {id(j) for i in decided if (j := pending.get(i)) is not None}
    if not objects:
        return jobs if isinstance(jobs, tuple) else tuple(jobs)
    hits = compress(count(), map(objects.__contains__, map(id, jobs)))
    out: list[JobView] = []
    start = 0
    for at in islice(hits, len(objects)):
        out.extend(jobs[start:at])
        start = at + 1
    out.extend(jobs[start:])
    return tuple(out)
