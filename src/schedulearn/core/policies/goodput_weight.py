"""`goodput`'s `share` and `spread` options: how jobs are weighed against each other.

Kept apart from the allocation loop (`core.policies.goodput`) so that the
weighing of jobs can change without touching the hot paths, and the
reverse. Pure: reads views, reports and values only.

Without it, the greedy allocation gives GPUs by value gained per GPU, so
a newcomer of unknown length (the most urgent under least attained
service) may take an old job's last GPU to grow. With it, as in Pollux
(whose power mean of speedups, p = -1, is zero while any job has no
GPU), a running job of unknown length is stopped only when the least
counts of all jobs do not fit. A running job whose remaining work is
known (declared or learned) is not guarded: shortest remaining time
first gains from stopping it.

`spread` values a job of unknown length by a concave function of its
speedup (`spread_utility`), as a power mean of speedups does in Pollux.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

from schedulearn.core.goodput import JobGoodput
from schedulearn.core.views import JobView

BONUS = 1e4  # times the best value in the pass: far above any growth's gain


class Valued(Protocol):
    """One job's options in a pass (`goodput._Job`): ascending counts, values by count."""

    @property
    def view(self) -> JobView: ...
    @property
    def counts(self) -> list[int]: ...
    @property
    def values(self) -> dict[int, float]: ...


def guarded(job: JobView, reports: Mapping[int, JobGoodput] | None) -> bool:
    """Whether `share_first` guards a job: a waiting one, or a running one of unknown length."""
    if job.placement is None:
        return True
    info = reports.get(job.id) if reports else None
    return info is None or info.remaining is None


def share_first(jobs: Sequence[Valued], reports: Mapping[int, JobGoodput] | None) -> None:
    """Make each guarded job's first jump (to its least count) outrank any growth.

    Adds one bonus, far above every value, to each guarded job's values:
    the gains of growing (differences of values) are unchanged, while a
    first jump gains the bonus, so the greedy allocation gives each guarded
    job its least count before any job grows. Among first jumps, the job
    with the best value at its least count still goes first."""
    top = max((v for j in jobs for v in j.values.values()), default=0.0)
    if top <= 0:
        return
    bonus = top * BONUS
    for j in jobs:
        if j.counts and guarded(j.view, reports):
            values = j.values
            for c in values:
                values[c] += bonus


def spread_utility(x: float, power: float) -> float:
    """`spread`'s diminishing returns of a speedup `x`: `1 + (x^p - 1) / p`
    (`1 + ln x` at p = 0), as a power mean of speedups with exponent p weighs
    them (Pollux's p = -1 gives `2 - 1/x`): 1 at x = 1 with slope 1 there, so
    a job's first GPU is worth what it was, and never below 0."""
    u = 1.0 + math.log(x) if power == 0.0 else 1.0 + (x**power - 1.0) / power
    return u if u > 0.0 else 0.0
