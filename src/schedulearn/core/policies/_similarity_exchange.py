"""Similarity's exchanges (its step 4): which running job a job just started trades
GPUs with, found without comparing each start with every running job; and the two
small rules both this and the policy read (`saving`, `allowed`).

State: a `Partners` lives for one pass (`Similarity._exchange` makes it); it
groups the running jobs once and remembers their savings per type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from schedulearn.core.views import ClusterView, JobView

if TYPE_CHECKING:
    from schedulearn.core.policies.similarity import _Types


class _Affinities(Protocol):
    """What `Partners` reads of the policy: its affinities and its `min_gain`."""

    min_gain: float

    def affinity(
        self, job: JobView, types: _Types, gpus: int | None = None
    ) -> dict[str, float]: ...


def saving(types: _Types, job: JobView, slow: float, fast: float) -> float:
    """Seconds the job's remaining work takes less at affinity `fast` than at `slow`."""
    return types.work[job.id] * (1.0 / slow - 1.0 / fast)


def allowed(job: JobView, gpu_type: str) -> bool:
    """May the job go on GPUs of `gpu_type` (it names none, or that one)?"""
    return not job.gpu_type or job.gpu_type == gpu_type


class Partners:
    """The running jobs a job just started may trade GPUs with (step 4), grouped so
    that one start is not compared with every running job.

    The rule, per start of job A on type f: among the running preemptible
    jobs R on one other type s with as many GPUs as A, not moved yet, that
    may go on f (and A on s), the one with the highest gain
    `(aff_R(f) / aff_R(s)) / (aff_A(f) / aff_A(s))`, the first in
    `view.running` order among equals, provided the gain is at least
    `min_gain` and R saves more seconds on f than A loses on s.

    The gain depends on R only through its affinities, which depend only on
    its model, its GPU count and s: jobs alike in those form one group, in
    `view.running` order, and share one gain. The gain depends on A only
    through its model, size, the type it names and f, so the groups whose
    gain qualifies are ranked once per such kind of start (`_ranked`), and
    a start searches them, highest gain first, for the first member that
    saves enough.
    """

    def __init__(self, policy: _Affinities, view: ClusterView, types: _Types) -> None:
        self._policy = policy
        self._types = types
        # (GPUs, s, model) -> [(position in view.running, job)], in that order.
        self._groups: dict[tuple[int, str, str | None], list[tuple[int, JobView]]] = {}
        for i, r in enumerate(view.running):
            placement = r.placement
            if not r.preemptible or placement is None or not placement.num_gpus:
                continue
            s = types.single(placement)
            if s is None:
                continue
            key = (placement.num_gpus, s, r.model)
            self._groups.setdefault(key, []).append((i, r))
        # The group keys by GPU count (a start only trades with jobs of its size).
        self._sized: dict[int, list[tuple[int, str, str | None]]] = {}
        for key in self._groups:
            self._sized.setdefault(key[0], []).append(key)
        # (group, f) -> each member's seconds saved on f over s, and their maximum.
        self._saved: dict[tuple[tuple[int, str, str | None], str], tuple[list[float], float]] = {}
        # (model, GPUs, GPU type named, f) of a start -> the groups it may trade with.
        self._ranks: dict[
            tuple[str | None, int, str | None, str],
            list[tuple[float, tuple[int, str, str | None], dict[str, float]]],
        ] = {}

    def _savings(
        self, key: tuple[int, str, str | None], f: str, aff_r: dict[str, float]
    ) -> tuple[list[float], float]:
        got = self._saved.get((key, f))
        if got is None:
            s = key[1]
            saved = [saving(self._types, r, aff_r[s], aff_r[f]) for _, r in self._groups[key]]
            got = self._saved[(key, f)] = (saved, max(saved))
        return got

    def _ranked(
        self, a: JobView, f: str, aff_a: dict[str, float]
    ) -> list[tuple[float, tuple[int, str, str | None], dict[str, float]]]:
        """The groups a start of `a` on `f` may trade with, gain first: those of its
        size on another type `a` may go on, whose gain reaches `min_gain`. Their
        gain depends on `a` only through its affinities (its model and size) and
        the type it names, so starts alike share one list."""
        key_a = (a.model, a.gpus, a.gpu_type, f)
        got = self._ranks.get(key_a)
        if got is None:
            types, policy = self._types, self._policy
            got = []
            for key in self._sized.get(a.gpus, ()):
                n, s, _ = key
                if s == f or not allowed(a, s):
                    continue
                aff_r = policy.affinity(self._groups[key][0][1], types, n)
                gain = (aff_r[f] / aff_r[s]) / (aff_a[f] / aff_a[s])
                if gain >= policy.min_gain:
                    got.append((gain, key, aff_r))
            # Highest gain first; among equal gains any order (the search below
            # takes the earliest job of all of them).
            got.sort(key=_gain, reverse=True)
            self._ranks[key_a] = got
        return got

    def best(self, a: JobView, f: str, moved: set[int]) -> JobView | None:
        types = self._types
        aff_a = self._policy.affinity(a, types)
        best: tuple[float, int, JobView] | None = None  # (gain, position, job)
        for gain, key, aff_r in self._ranked(a, f, aff_a):
            if best is not None and gain < best[0]:
                break  # the rest gain less
            members = self._groups[key]
            s = key[1]
            lost = saving(types, a, aff_a[s], aff_a[f])
            saved, most = self._savings(key, f, aff_r)
            if not most > lost:
                continue
            for (i, r), saved_r in zip(members, saved, strict=True):
                if best is not None and gain == best[0] and i > best[1]:
                    break  # an earlier job of equal gain is already chosen
                if saved_r > lost and r.id not in moved and allowed(r, f):
                    best = (gain, i, r)
                    break
        return None if best is None else best[2]


def _gain(entry: tuple[float, tuple[int, str, str | None], dict[str, float]]) -> float:
    return entry[0]
