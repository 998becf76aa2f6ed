"""Making room for a waiting job by preempting running ones: the one copy of that rule.

Every preempting policy (srtf, edf, tiresias, timeslice) has the same
problem: given the running jobs it is willing to suspend, most preferred
first, suspend the fewest of them that let the waiting job start. The
policies differ only in which jobs they would suspend and in what order,
so each states that as a key and `Victims` does the rest:

- the candidates are the running preemptible jobs the policy admits
  (`may`), sorted by `level` (highest first: the job the policy most
  wants to suspend) and then by `tiebreak`;
- a waiting job may suspend only candidates whose level is above a bar
  it brings (`above`: its own deadline, remaining time, queue); these
  are a prefix of the sorted candidates;
- victims are suspended in that order until the waiting job fits (one
  node when it fits, else a gang over the fewest nodes, as
  `FreePool.pack` places it); a victim's whole placement is freed, every
  node of a gang at once;
- but when that spreads a job one node could hold, and some node's free
  GPUs and the candidates on it hold the whole job, that node's
  candidates are suspended instead, in order, and the job goes there
  whole (the first such node as the order reaches it): a job spread over
  nodes runs slower and spreads whoever comes after it (issue 32: an
  8-GPU reclaim landed on several nodes). A caller may bound that choice
  by a tier of its order (`make_room`'s `tier`);
- victims freed early whose GPUs the placement did not need are kept
  running, least preferred first;
- a non-preemptible job is never suspended;
- a job a live host is already stopping (`JobView.stopping`, shown as
  running until its process exits) comes first, above every bar and
  whatever `may` says: taking it again costs nothing, and a new victim in
  its place would stop one job too many. (The simulator has none: its
  preemptions free GPUs at once.)

State: a `Victims` lives for one pass. It builds its sorted candidates on
first use (most passes start every job without preempting anyone) and
drops the ones it suspends. `make_room` and `can_retake` work on the
caller's `FreePool` and hold nothing.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Any

from schedulearn.core.decisions import Decision, Preempt, Start
from schedulearn.core.placement import FreePool
from schedulearn.core.views import ClusterView, JobView, Placement

_NO_BAR = float("-inf")
_STOPPING = float("inf")  # the level of a job already being stopped


def _no_level(job: JobView) -> float:
    raise AssertionError("Victims.ranked: the candidates came ranked")


@dataclass(frozen=True, slots=True)
class Room:
    """What making room decided: suspend `victims`, start the job on `placement`.

    `decisions` are the `Preempt`s then the `Start`, in the order a pass
    returns them; `free` is the pool's free GPU count after them.
    """

    placement: Placement
    victims: tuple[JobView, ...]
    decisions: tuple[Decision, ...]
    free: int


class Victims:
    """The running jobs one pass may suspend, most preferred first, built on first use.

    `level(job)` ranks a candidate (highest suspended first) and is what a
    waiting job's bar is compared with; `tiebreak(job)` orders candidates
    of equal level (ascending). `may(job)` admits a candidate (besides
    being preemptible and placed), e.g. "its time slice is used up".
    """

    __slots__ = ("_jobs", "_level", "_levels", "_may", "_pool", "_running", "_tiebreak")

    def __init__(
        self,
        view: ClusterView,
        pool: FreePool,
        level: Callable[[JobView], float],
        tiebreak: Callable[[JobView], Any],
        may: Callable[[JobView], bool] | None = None,
    ) -> None:
        self._running = view.running
        self._pool = pool
        self._level = level
        self._tiebreak = tiebreak
        self._may = may
        self._jobs: list[JobView] | None = None
        # Minus each candidate's level, ascending (parallel to `_jobs`), for bisect.
        self._levels: list[float] = []

    @classmethod
    def ranked(
        cls, view: ClusterView, pool: FreePool, jobs: list[JobView], levels: list[float]
    ) -> Victims:
        """Candidates the policy has ranked itself: `jobs` most preferred first,
        every one preemptible and placed, and `levels` their levels (so
        descending), as if `level` and `tiebreak` had sorted them.

        For a policy whose ranking is cheaper written out than asked of a
        key per job on every pass (tiresias).
        """
        if len(jobs) != len(levels):
            raise ValueError("Victims.ranked: one level for each job")
        if any(j.stopping for j in jobs):
            # Jobs being stopped first (a stable sort keeps the policy's order otherwise).
            ranked = sorted(zip(jobs, levels, strict=True), key=lambda p: not p[0].stopping)
            jobs = [j for j, _ in ranked]
            levels = [_STOPPING if j.stopping else level for j, level in ranked]
        victims = cls(view, pool, _no_level, _no_level)
        victims._jobs = jobs
        victims._levels = [-level for level in levels]
        return victims

    def _candidates(self) -> list[JobView]:
        if self._jobs is None:
            may = self._may
            ranked = sorted(
                (
                    (-_STOPPING if j.stopping else -self._level(j), self._tiebreak(j), j)
                    for j in self._running
                    if j.preemptible
                    and j.placement is not None
                    and (may is None or j.stopping or may(j))
                ),
                key=lambda t: (t[0], t[1]),
            )
            self._jobs = [j for _, _, j in ranked]
            self._levels = [neg for neg, _, _ in ranked]
        return self._jobs

    def any(self, above: float = _NO_BAR) -> bool:
        """Is there a candidate whose level is above `above`?"""
        return self._eligible(above) > 0

    def _eligible(self, above: float) -> int:
        self._candidates()
        # Candidates are sorted by level, highest first: those above the bar are a prefix.
        return bisect_left(self._levels, -above)

    def room_for(self, job: JobView, free: int, above: float = _NO_BAR) -> Room | None:
        """Suspend candidates above `above`, in order, until `job` fits; None if it never does.

        `free` is the pool's free GPU count now (the caller keeps it, so
        no pass re-sums the cluster). On success the pool holds the job's
        placement with the victims' GPUs released, and the victims are no
        longer candidates; on failure nothing changed.
        """
        eligible = self._eligible(above)
        if not eligible:
            return None
        jobs = self._candidates()
        made = make_room(self._pool, job, islice(jobs, eligible), free)
        if made is None:
            return None
        placement, used = made
        decisions: list[Decision] = []
        for victim in used:
            decisions.append(Preempt(victim.id))
            free += victim.allocated_gpus
        decisions.append(Start(job.id, placement))
        # The victims are among the first candidates: drop them from that prefix
        # only, so a pass that preempts often does not copy every candidate each time.
        gone = {v.id for v in used}
        levels = self._levels
        kept: list[JobView] = []
        kept_levels: list[float] = []
        k = 0
        while gone and k < len(jobs):
            if jobs[k].id in gone:
                gone.discard(jobs[k].id)
            else:
                kept.append(jobs[k])
                kept_levels.append(levels[k])
            k += 1
        jobs[:k] = kept
        levels[:k] = kept_levels
        return Room(placement, tuple(used), tuple(decisions), free - placement.num_gpus)


def make_room(
    pool: FreePool,
    job: JobView,
    victims: Iterable[JobView],
    free: int,
    gpus: int | None = None,
    tier: Callable[[JobView], Hashable] | None = None,
) -> tuple[Placement, list[JobView]] | None:
    """Suspend victims, in the given order, until `job` fits; keep only those needed.

    When the shortest prefix of the order that lets the job fit spreads
    it over nodes, a node that the victims can empty enough to hold the
    whole job is preferred (`_one_node`). `tier(victim)` bounds that
    choice: the victims are sorted by tier (the caller's order, coarser),
    and only those up to the end of the tier the prefix reaches may be
    taken for it (the fair-share reclaim: a queue less over its share
    keeps its jobs for a convenient node); None: any victim offered.

    `free` is the number of GPUs the pool has free now. Victims that are
    not preemptible or not running are skipped: a non-preemptible job is
    never suspended. On success the pool holds the job's placement and
    the needed victims' GPUs are free; the victims actually needed are
    returned in order. On failure the pool is unchanged.
    """
    n = job.gpus if gpus is None else gpus
    offered = [v for v in victims if v.preemptible and v.placement is not None]
    released: list[JobView] = []
    found: Placement | None = None
    gained = 0
    for victim in offered:
        assert victim.placement is not None
        pool.release(victim)
        released.append(victim)
        gained += victim.placement.num_gpus
        # A placement needs at least n free GPUs in all; skip the search until then.
        if free + gained < n:
            continue
        found = pool.pack(job, n)
        if found is not None:
            break
    if found is None:
        _retake(pool, released)
        return None
    placement = found
    if placement.num_nodes > 1:
        limit = len(offered)
        if tier is not None:
            reached = tier(released[-1])
            limit = len(released)
            while limit < len(offered) and tier(offered[limit]) == reached:
                limit += 1
        _retake(pool, released)
        whole = _one_node(pool, job, offered[:limit], n)
        if whole is not None:
            placement, released = whole
        else:
            # The pool as when `found` was chosen.
            for victim in released:
                pool.release(victim)
    pool.take(job, placement)
    # Victims released early may have freed GPUs the placement did not
    # use (another node, another GPU type): let those keep running. Try
    # the least preferred first so the policy's preference order holds.
    needed: list[JobView] = []
    for victim in reversed(released):
        assert victim.placement is not None
        if can_retake(pool, victim, victim.placement):
            pool.take(victim, victim.placement)
        else:
            needed.append(victim)
    needed.reverse()
    return placement, needed


def _one_node(
    pool: FreePool, job: JobView, offered: list[JobView], n: int
) -> tuple[Placement, list[JobView]] | None:
    """Victims that free room for the whole job on one node, if any do.

    A job spread over nodes runs slower (cross-node traffic) and spreads
    whoever comes next, so a node that can hold the job whole beats the
    shortest prefix of the order (among the victims `offered`). The
    victims are grouped by node as the order offers them; the first node
    (in that order) whose free GPUs and victims so far reach `n` is tried,
    releasing its victims in the given order (all of a gang victim's nodes
    with it). Each node is tried once,
    so the cost is one release, search and retake per node the victims
    hold. On success the victims stay released (the caller keeps those not
    needed); on failure the pool is unchanged.
    """
    if n <= 0:
        return None
    gain: dict[str, int] = {}
    on: dict[str, list[JobView]] = {}
    tried: set[str] = set()
    for victim in offered:
        assert victim.placement is not None
        for name, gpus in victim.placement:
            on.setdefault(name, []).append(victim)
            gain[name] = gain.get(name, 0) + len(gpus)
            if name in tried or pool.num_free(pool.node(name)) + gain[name] < n:
                continue
            tried.add(name)
            released = on[name]
            for v in released:
                pool.release(v)
            # best_fit places on one node only (it may pick another node the
            # release emptied enough; the caller keeps the victims not needed).
            placement = pool.best_fit(job, n)
            if placement is not None:
                return placement, list(released)
            _retake(pool, released)
    return None


def _retake(pool: FreePool, released: list[JobView]) -> None:
    """Undo releases, last first (the pool as before them)."""
    for victim in reversed(released):
        assert victim.placement is not None
        pool.take(victim, victim.placement)


def can_retake(pool: FreePool, job: JobView, placement: Placement) -> bool:
    """Are all of `placement`'s GPUs, CPUs and memory free in `pool` now, on
    nodes that can run `job` (a swap may offer it another job's nodes)?"""
    for name, gpus in placement:
        node = pool.node(name)
        free = pool.free_gpus(node)
        if any(g not in free for g in gpus) or not pool.runnable(job, node):
            return False
        cpus, mem = job.demand_on(placement, len(gpus), node.cpus)
        if cpus and pool.free_cpus(node) + 1e-9 < cpus:
            return False
        if mem and pool.free_memory_gb(node) + 1e-9 < mem:
            return False
    return True
