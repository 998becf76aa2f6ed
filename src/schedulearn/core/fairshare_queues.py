"""Tenant queues: what each queue is promised, what it has used, and its share now.

A `Queue` (a team or a project) has guaranteed GPUs (optionally per GPU
type), an optional limit and a fair-share weight. `Tenancy` is what the
host hands the core with each snapshot (`ClusterView.tenancy`): the
queues and each queue's decayed usage. `UsageMeter` keeps that usage for
a host (the simulator now, the live scheduler later); `shares` turns
queues, usage and the snapshot into each queue's GPUs in use and its
fair share of the cluster at this moment.

Why queues travel in the view and not as options of the fair-share
policy: queues are cluster data that an admin edits while the system
runs (like nodes), and usage is history the host records; the policy in
force is switched independently of both. With queues in the view, the
same `FairShare` object serves any queue set, a queue change needs no
policy switch, the reason a job waits (`fairshare_reasons`) is judged
from the snapshot alone, and the policy keeps no state between passes
(a host may rebuild it at any time).

Shares, in one place (all in GPUs; a job's GPUs count for its queue):
- the default queue (`DEFAULT_QUEUE`, jobs that name no queue) owns the
  GPUs no guarantee covers: its guarantee is its declared one plus the
  healthy GPUs minus the sum of every declared guarantee (never below
  its declared one), so creating queues never leaves it with nothing;
- demand = GPUs in use + GPUs its pending jobs ask for, at most its limit;
- first every queue gets min(demand, guarantee);
- the rest of the healthy GPUs are lent by weighted water-filling over the
  queues that want more, each weight scaled by a usage-decay factor
  `2 ** -(usage share / weight share)` (Slurm's classic fair-share
  factor): a queue that used much of the cluster lately gets less of
  what is idle now. Half-life: `Tenancy.half_life` (the meter's).

Jobs of a queue the tenancy does not name belong to a best-effort queue:
no guarantee, weight 1, no limit. A job that names no queue ("") is in
the default queue, `DEFAULT_QUEUE`: declared like any other, or else
best-effort (`named` and the meter map "" to it, so a declared
`default` queue's guarantee applies to those jobs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING

from schedulearn.core.fairshare_fill import AHEAD_AT, check_tree, split_shares, used_lately

if TYPE_CHECKING:
    from schedulearn.core.views import ClusterView, JobView

__all__ = ["AHEAD_AT", "used_lately"]  # re-exported: part of the queues' vocabulary

ANY_TYPE = ""
# The queue of a job that names none (JobView.queue "").
DEFAULT_QUEUE = "default"
_EPS = 1e-9
_QUEUE_OF = attrgetter("queue")


@dataclass(frozen=True, slots=True)
class Queue:
    """One tenant queue.

    `guaranteed` maps a GPU type to the GPUs of that type the queue is
    promised ("" = any type): `{"": 8}` is 8 GPUs of any type,
    `{"v100": 4}` four V100s. `limit` caps the GPUs it may hold at once
    (None: no cap). `weight` is its share of idle capacity relative to
    the other queues. `parent` puts it under another queue, whose
    guarantee it shares with its siblings first (`fairshare_fill`).
    """

    name: str
    guaranteed: Mapping[str, int] = field(default_factory=dict)
    limit: int | None = None
    weight: float = 1.0
    parent: str | None = None
    # sum(guaranteed.values()), read on every share comparison of a pass.
    _gpus: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError('a queue needs a name ("" is the default queue, not a declared one)')
        bad = {t: n for t, n in self.guaranteed.items() if not isinstance(n, int) or n < 0}
        if bad:
            raise ValueError(
                f"queue {self.name!r}: guaranteed GPUs must be whole and 0 or more, not {bad}"
            )
        object.__setattr__(self, "_gpus", sum(self.guaranteed.values()))
        if self.limit is not None and self.limit < self.guaranteed_gpus:
            raise ValueError(
                f"queue {self.name!r}: limit {self.limit} is below its {self.guaranteed_gpus} "
                "guaranteed GPUs; raise the limit or lower the guarantee"
            )
        if not self.weight > 0:
            raise ValueError(f"queue {self.name!r}: weight must be above 0, not {self.weight}")
        if self.parent is not None and self.parent in (self.name, ""):
            raise ValueError(f"queue {self.name!r}: a queue's parent must be another queue")
        object.__setattr__(self, "guaranteed", dict(self.guaranteed))

    @classmethod
    def of(
        cls,
        name: str,
        guaranteed: int = 0,
        limit: int | None = None,
        weight: float = 1.0,
        parent: str | None = None,
    ) -> Queue:
        """A queue guaranteed `guaranteed` GPUs of any type."""
        return cls(name, {ANY_TYPE: guaranteed} if guaranteed else {}, limit, weight, parent)

    @property
    def guaranteed_gpus(self) -> int:
        return self._gpus

    @property
    def typed(self) -> tuple[str, ...]:
        """The GPU types of a queue guaranteed only typed GPUs (empty if any type goes)."""
        if not self.guaranteed or ANY_TYPE in self.guaranteed:
            return ()
        return tuple(sorted(t for t, n in self.guaranteed.items() if n > 0))


def best_effort(name: str) -> Queue:
    """The queue of jobs whose queue the tenancy does not name."""
    return Queue(name or DEFAULT_QUEUE)


def named(view: ClusterView) -> ClusterView:
    """`view` with the jobs that name no queue in `DEFAULT_QUEUE`.

    The fair-share layer groups jobs by `JobView.queue` and queues by
    `Queue.name`; without this, jobs with queue "" would be grouped apart
    from the (declared or best-effort) default queue and never served by
    its share rounds. Returns `view` itself when every job names a queue.
    """
    # map(attrgetter) sweeps the tuples at C speed: this runs on every pass.
    if all(map(_QUEUE_OF, view.pending)) and all(map(_QUEUE_OF, view.running)):
        return view
    from dataclasses import replace

    from schedulearn.core.views import rebuild

    def fix(jobs: tuple[JobView, ...]) -> tuple[JobView, ...]:
        return tuple(j if j.queue else rebuild(j, queue=DEFAULT_QUEUE) for j in jobs)

    return replace(view, pending=fix(view.pending), running=fix(view.running))


@dataclass(frozen=True, slots=True)
class Tenancy:
    """The queues and their decayed usage (GPU-seconds) as of the snapshot."""

    queues: tuple[Queue, ...]
    usage: Mapping[str, float] = field(default_factory=dict)
    # Seconds for past usage to count half; None: usage never decays.
    half_life: float | None = 7 * 24 * 3600.0
    # The part of `usage` by jobs that fit their queue's own guarantee
    # (`fits_guarantee`): what a queue is judged behind or ahead on
    # (`QueueShare.ahead`). None: all of `usage`.
    served: Mapping[str, float] | None = None
    # What each queue was owed (GPU-seconds, decayed like usage): the integral
    # of `owed_rate`, what it would have held alone on its own guarantee.
    # None: the host keeps no such figure.
    owed: Mapping[str, float] | None = None
    by_name: Mapping[str, Queue] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [q.name for q in self.queues]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"queues named twice: {', '.join(dupes)}; give each queue one entry")
        object.__setattr__(self, "by_name", {q.name: q for q in self.queues})
        check_tree(self.by_name, DEFAULT_QUEUE)

    def queue(self, name: str) -> Queue:
        q = self.by_name.get(name)
        return best_effort(name) if q is None else q

    @property
    def has_limits(self) -> bool:
        return any(q.limit is not None for q in self.queues)

    @property
    def counted(self) -> Mapping[str, float]:
        """The use a queue is judged ahead or behind on: `served`, or all of
        `usage` from a host that keeps no served figure."""
        return self.usage if self.served is None else self.served


def own_guarantee(tenancy: Tenancy, queue: str, capacity: int) -> int:
    """`queue`'s own guaranteed GPUs on `capacity` healthy ones: its declared ones
    and, for the default queue, those no root guarantee covers (`uncovered`)."""
    name = queue or DEFAULT_QUEUE
    declared = tenancy.queue(name)._gpus
    if name != DEFAULT_QUEUE:
        return declared
    return declared + uncovered(tenancy.queues, capacity)


def fits_guarantee(tenancy: Tenancy, queue: str, gpus: int, capacity: int) -> bool:
    """Could a job of `queue` asking for `gpus` run on its queue's own guarantee alone?

    Only such jobs' use counts towards the queue's share of the GPU-time
    (`Tenancy.served`, and so `QueueShare.ahead`): a larger job runs on
    borrowed GPUs only, which its team alone could not run at all, so the
    GPU-time it takes must not leave the team's smaller jobs unprotected
    (a team worse off for sharing). A queue with no guarantee has nothing
    to be behind on: everything counts.
    """
    own = own_guarantee(tenancy, queue, capacity)
    return own == 0 or gpus <= own


def owed_rate(own: int, demand: int) -> int:
    """GPUs a queue is owed while its jobs that fit its own guarantee (`own`,
    `fits_guarantee`) ask for `demand` GPUs (running and waiting): what it would
    hold alone on that guarantee. A queue that wants nothing is owed nothing."""
    return max(0, min(demand, own))


class UsageMeter:
    """Each queue's GPU-seconds of use, decayed with a half-life, kept by a host.

    The host reports every change of a queue's GPUs in use (`change`); the
    meter integrates `dU/dt = busy - U ln2 / half_life` per queue lazily,
    so a change costs O(1) and reading all queues (`usage_at`) O(queues).
    """

    __slots__ = ("_busy", "_rate", "_since", "_used", "now")

    def __init__(self, half_life: float | None) -> None:
        if half_life is not None and not half_life > 0:
            raise ValueError(f"a usage half-life must be positive seconds, not {half_life}")
        self._rate = 0.0 if half_life is None else math.log(2) / half_life
        self._used: dict[str, float] = {}
        self._busy: dict[str, int] = {}
        self._since: dict[str, float] = {}
        # The time `live()` reads usage at; the host moves it before each pass.
        self.now = 0.0

    def _settle(self, queue: str, now: float) -> float:
        used = self._used.get(queue, 0.0)
        busy = self._busy.get(queue, 0)
        dt = now - self._since.get(queue, now)
        if dt > 0:
            rate = self._rate
            if rate == 0.0:
                used += busy * dt
            else:
                keep = math.exp(-rate * dt)
                used = used * keep + busy * (1.0 - keep) / rate
        return used

    def change(self, now: float, queue: str, gpus: int) -> None:
        """`queue` holds `gpus` more (or fewer, if negative) GPUs from `now` on."""
        queue = queue or DEFAULT_QUEUE
        self._used[queue] = self._settle(queue, now)
        self._since[queue] = now
        self._busy[queue] = self._busy.get(queue, 0) + gpus

    def usage_at(self, now: float) -> dict[str, float]:
        """Every queue's decayed usage as of `now` (GPU-seconds)."""
        return {q: self._settle(q, now) for q in self._since}

    def live(self) -> Mapping[str, float]:
        """A read-only mapping of usage as of `self.now`, computed per queue on access.

        For a host that hands `Tenancy(usage=meter.live())` to a pass: most
        passes never read usage (nobody waits), so none is computed for them.
        """
        return _LiveUsage(self)


class _LiveUsage(MappingABC[str, float]):
    __slots__ = ("_meter",)

    def __init__(self, meter: UsageMeter) -> None:
        self._meter = meter

    def __getitem__(self, queue: str) -> float:
        meter = self._meter
        if queue not in meter._since:
            raise KeyError(queue)
        return meter._settle(queue, meter.now)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._meter._since))

    def __len__(self) -> int:
        return len(self._meter._since)


@dataclass(slots=True)
class QueueShare:
    """One queue's position in one pass: what it holds, wants and may have."""

    queue: Queue
    used: int = 0
    # GPUs held by its non-preemptible jobs (those beyond its guarantee are
    # borrowed, and requeued when a lender reclaims them).
    pinned: int = 0
    # GPUs held by its jobs larger than its own guarantee (`is_beyond`): they
    # run on borrowed GPUs only, which its team alone could not have had, so
    # they take nothing from the guarantee its smaller jobs are protected by.
    beyond: int = 0
    pending: int = 0
    # Its deserved share now: guarantee (up to demand) plus its weighted
    # part of what no other guarantee needs (`fill`).
    share: float = 0.0
    # GPUs no declared guarantee covers, owned by the default queue (`fill`).
    uncovered: int = 0
    # In a queue tree: GPUs of its parent's guarantee its siblings do not need
    # now, which it may keep as its own (for a parent's own jobs, minus what
    # its children are promised); `fairshare_fill`.
    inherited: int = 0
    # It is not behind: it has had at least `AHEAD_AT` of its guaranteed
    # fraction of the GPU-time used lately (decayed usage, `fill`). Its
    # guarantee is kept over time, so it lends what it holds like a borrower
    # until it falls behind.
    ahead: bool = False

    @property
    def name(self) -> str:
        return self.queue.name

    @property
    def own(self) -> int:
        """Its own guaranteed GPUs (`own_guarantee`): declared, and for the
        default queue the uncovered ones; not what a tree lends it."""
        return self.queue._gpus + self.uncovered

    def only_borrows(self, job: JobView) -> bool:
        """Can `job` run on borrowed GPUs only: larger than the queue's own
        guarantee (`is_beyond`), or of a queue guaranteed none?"""
        own = self.own
        return own == 0 or job.gpus > own

    def is_beyond(self, job: JobView) -> bool:
        """Is `job` larger than the queue's own guarantee (`fits_guarantee`, negated)?"""
        own = self.own
        return own > 0 and job.gpus > own

    @property
    def fitting(self) -> int:
        """GPUs held by its jobs that fit its own guarantee: what a reclaim
        restores and what its guarantee holds idle GPUs for."""
        return self.used - self.beyond

    @property
    def guaranteed(self) -> int:
        """Its guaranteed GPUs: the declared ones (and, for the default queue, the
        uncovered; in a tree, what it inherits)."""
        return self.queue._gpus + self.uncovered + self.inherited

    @property
    def cap(self) -> int:
        """The most GPUs it may hold (its limit, or unbounded)."""
        limit = self.queue.limit
        return limit if limit is not None else 1 << 30

    @property
    def demand(self) -> int:
        return min(self.cap, self.used + self.pending)

    def owing(self, waiting: Iterable[JobView]) -> int:
        """GPUs it is owed now (`owed_rate`): of its running jobs that fit its own
        guarantee (`fitting`) and its `waiting` ones that do, at most that guarantee."""
        own = self.own
        if own <= 0:
            return 0
        demand = self.fitting
        if demand < own:
            for job in waiting:
                if job.gpus <= own:
                    demand += job.gpus
                    if demand >= own:
                        break
        return owed_rate(own, demand)

    def within(self, gpus: int, bound: float) -> bool:
        """Would `gpus` more keep it at or below `bound`?"""
        return self.used + gpus <= bound + _EPS

    def may_hold(self, job: JobView) -> bool:
        """Its limit: may it start `job` now (any job may borrow beyond the guarantee)?"""
        return self.used + job.gpus <= self.cap


def shares(view: ClusterView, tenancy: Tenancy) -> dict[str, QueueShare]:
    """Every queue with jobs or a guarantee: its use now and its fair share (see module doc)."""
    return sweep(view, tenancy)[0]


def sweep(
    view: ClusterView, tenancy: Tenancy
) -> tuple[dict[str, QueueShare], dict[str, list[JobView]]]:
    """`shares`, and each queue's pending jobs in the view's order, in one sweep of the jobs."""
    by_queue = pending_by_queue(view.pending)
    waiting = {q: sum(j.gpus for j in jobs) for q, jobs in by_queue.items()}
    return book(view, tenancy, held_by_queue(view.running), waiting), by_queue


@dataclass(slots=True)
class Held:
    """What one queue's running jobs hold: GPUs, of them the non-preemptible
    jobs', and GPUs by the size the jobs asked for. (Mutable: a book that
    follows the running jobs, `fairshare_book.ShareBook`, counts in it.)"""

    used: int
    pinned: int
    by_size: dict[int, int]

    def beyond(self, gpus: int) -> int:
        """GPUs held by jobs that asked for more than `gpus`."""
        return sum(n for size, n in self.by_size.items() if size > gpus)


def held_by_queue(running: Iterable[JobView]) -> dict[str, Held]:
    """Per queue: what its running jobs hold (`Held`)."""
    held: dict[str, tuple[list[int], dict[int, int]]] = {}
    for job in running:
        mine = held.get(job.queue)
        if mine is None:
            mine = held[job.queue] = ([0, 0], {})
        counts, by_size = mine
        n = job.allocated_gpus
        counts[0] += n
        if not job.preemptible:
            counts[1] += n
        by_size[job.gpus] = by_size.get(job.gpus, 0) + n
    return {q: Held(c[0], c[1], sizes) for q, (c, sizes) in held.items()}


def pending_by_queue(pending: Iterable[JobView]) -> dict[str, list[JobView]]:
    """Per queue: its pending jobs, in the order given."""
    by_queue: dict[str, list[JobView]] = {}
    for job in pending:
        mine = by_queue.get(job.queue)
        if mine is None:
            mine = by_queue[job.queue] = []
        mine.append(job)
    return by_queue


def book(
    view: ClusterView,
    tenancy: Tenancy,
    held: Mapping[str, Held],
    waiting: Mapping[str, int],
    capacity: int | None = None,
) -> dict[str, QueueShare]:
    """Every queue with jobs or a guarantee, from the GPUs it holds (`held_by_queue`)
    and the GPUs its pending jobs ask for, its share filled (`capacity`: the
    view's healthy GPUs, `ClusterView.total_gpus`, if the caller has them)."""
    out: dict[str, QueueShare] = {q.name: QueueShare(q) for q in tenancy.queues}

    def share(name: str) -> QueueShare:
        s = out.get(name)
        if s is None:
            s = out[name] = QueueShare(tenancy.queue(name))
        return s

    for name, h in held.items():
        s = share(name)
        s.used, s.pinned = h.used, h.pinned
    for name, gpus in waiting.items():
        share(name).pending = gpus
    if capacity is None:
        capacity = view.total_gpus
    fill(out.values(), capacity, tenancy.usage, tenancy.counted, tenancy.owed)
    for name, h in held.items():
        s = out[name]
        if s.own > 0:  # `fill` set the default queue's uncovered GPUs
            s.beyond = h.beyond(s.own)
    return out


def uncovered(queues: Iterable[Queue], capacity: int) -> int:
    """The healthy GPUs no root queue's guarantee covers (the default queue owns them)."""
    return max(0, capacity - sum(q._gpus for q in queues if q.parent is None))


def fill(
    queues: Iterable[QueueShare],
    capacity: int,
    usage: Mapping[str, float],
    served: Mapping[str, float] | None = None,
    owed: Mapping[str, float] | None = None,
) -> None:
    """Set each queue's `share`: guarantees first, then weighted water-filling
    (`fairshare_fill`, which also splits a queue tree), and `ahead` on `served`
    (`Tenancy.served`; None: on `usage`).

    `queues` must hold every declared queue (the default queue's guarantee
    is what the root queues' guarantees leave of `capacity`, the healthy GPUs).
    """
    qs = list(queues)
    free = uncovered((s.queue for s in qs), capacity)
    for s in qs:
        s.uncovered = free if s.name == DEFAULT_QUEUE else 0
    split_shares(qs, capacity, usage, usage if served is None else served, owed)
