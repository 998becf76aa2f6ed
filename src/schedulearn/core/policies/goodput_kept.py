"""Goodput's weighing of waiting jobs, kept from one pass to the next (a cache).

`Goodput._jobs` weighs every job at every pass: on a backlog of 10,000
waiting jobs that was most of a pass (issue 36). A waiting job's options
(its GPU counts and what each is worth) are a function of:

- its view (the live server keeps a waiting job's view object from pass
  to pass, `server.services.snapshot.PendingCache`; the simulator keeps its
  own), when the view has no `started_at` (then its remaining time does not
  depend on the clock, `JobView.remaining_at`) and no placement;
- no goodput report for it in this pass (a report makes it measured);
- the pass constants in the key `begin` is given: the cluster's node size
  and GPU total and the policy's own settings.

`KeptWeights` holds, per view (by identity, the view held so that its id
is not reused while it is known), what `_jobs` computed for it under one
key, and answers only for the same view under the same key. Anything else
a waiting job's value comes to depend on must join the key, or the job
must not be kept. A job of unknown speed is kept for its counts only: its
values depend on the other jobs (the pass's best weight), so `_jobs` sets
them anew in every pass (its entry says `unknown`; its weight is 0). Each
pass keeps only the views it met, so the cache holds one backlog at most.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from itertools import compress
from typing import Generic, TypeVar

from schedulearn.core.views import JobView

Entry = TypeVar("Entry")


class KeptWeights(Generic[Entry]):
    """Per waiting view: its entry and its weight, from the last pass under the same key."""

    __slots__ = ("_kept", "_key", "_next")

    def __init__(self) -> None:
        self._key: Hashable = None
        self._kept: dict[int, tuple[JobView, Entry, float]] = {}
        self._next: dict[int, tuple[JobView, Entry, float]] = {}

    def begin(self, key: Hashable) -> None:
        """A pass under `key` (the pass constants) begins: forget all under another."""
        if key != self._key:
            self._kept = {}
            self._key = key
        self._next = {}

    def get(self, job: JobView) -> tuple[Entry, float] | None:
        """The entry and weight kept for this very view (kept for the next pass too)."""
        hit = self._kept.get(id(job))
        if hit is None or hit[0] is not job:
            return None
        self._next[id(job)] = hit
        return hit[1], hit[2]

    def many(self, jobs: Sequence[JobView]) -> list[tuple[JobView, Entry, float] | None]:
        """`get` for each of `jobs` at once, in C (a backlog of thousands is read
        every pass): per job, (its view, entry, weight) kept for this very view, or
        None. Those found are kept for the next pass too.

        By id alone: a view known here is held here, so no other live object has
        its id, and a job with that id is that view."""
        ids = list(map(id, jobs))
        hits = list(map(self._kept.get, ids))
        found = compress(zip(ids, hits, strict=True), hits)  # the Nones left out
        self._next.update(found)  # type: ignore[arg-type]
        return hits

    def put(self, job: JobView, entry: Entry, weight: float) -> None:
        """Keep what this pass computed for a waiting view (see the module doc for which)."""
        self._next[id(job)] = (job, entry, weight)

    def end(self) -> None:
        """The pass ended: keep only the views it met."""
        self._kept, self._next = self._next, {}

    @staticmethod
    def keepable(job: JobView) -> bool:
        """Whether a job's weighing is a function of its view and the key alone
        (given no report for it): waiting, never started in this view."""
        return job.placement is None and job.started_at is None
