"""When a queue ahead starts or stops lending: the part of a quiet pass's bound
that `PassState.lends` needs (`FairShare.steady_until`, `_still_quiet`).

A queue ahead on its share of the GPU-time lends GPUs of its fitting jobs
down to `k` only while it would stay ahead `LEND_FOR` times `min_run`
holding `k` (`PassState.lends`). That answer moves with time alone: the
queue's decayed use grows or fades while it holds what it holds now, so a
pass that refused a start because the lender would fall behind (issue 32:
tiresias's preemption of a queue's two jobs for another queue's job,
refused until the lender had run long enough) may accept it a few ticks
later with the same jobs. A host that skips quiet ticks must not skip that
one: `next_lend_turn` says when it comes.

The rule, for one queue `s` and a count `k`: with decay rate r, every
queue's use follows dS/dt = busy - r S, so after t seconds and then the
horizon h holding `k`, `s`'s use is k/r (1 - e^-rh) + b/r e^-rh + (S - b/r)
e^-r(t+h). That is `s`'s use at t in a world whose use was moved on by h
first (`s` holding `k`) and where `s` holds k + (b - k) e^-rh GPUs; every
other queue moves on by h as it is. So `fairshare_fill.next_turn` over
that world, for `s` alone, says when the answer turns (its margin crosses
zero at most once). Keeping more GPUs only helps `s` stay ahead, so the
answers for k = 0 .. fitting - 1 are false below one count and true from
it: only the two counts either side of it can turn first.

State: none; a function of one pass (its book and tenancy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from schedulearn.core.fairshare_fill import next_turn
from schedulearn.core.fairshare_queues import QueueShare
from schedulearn.core.fairshare_state import LEND_FOR, PassState


def next_lend_turn(full: PassState) -> float:
    """Seconds until some `full.lends(s, k)` of a queue ahead may answer
    otherwise with the jobs running now (inf if none can). Read after a
    pass that decided nothing: its book is the snapshot's."""
    horizon = LEND_FOR * full.min_run
    if horizon <= 0:
        return math.inf  # it lends everything, always
    soonest = math.inf
    for s in full.book.values():
        fitting = s.fitting
        if not s.ahead or fitting <= 0:
            continue
        lowest = _lowest_lent(full, s)
        for k in (lowest - 1, lowest):
            if 0 <= k < fitting:
                soonest = min(soonest, _turn(full, s, k, horizon))
    return soonest


def _lowest_lent(full: PassState, s: QueueShare) -> int:
    """The fewest fitting GPUs `s` may keep and still lend (`lends`), or its
    fitting GPUs if it lends none (the answers rise with the count kept)."""
    lo, hi = 0, s.fitting
    while lo < hi:
        mid = (lo + hi) // 2
        if full.lends(s, mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _turn(full: PassState, s: QueueShare, k: int, horizon: float) -> float:
    """Seconds until `full.lends(s, k)` turns (module doc), inf if never."""
    tenancy = full.tenancy
    half_life = tenancy.half_life
    rate = 0.0 if half_life is None else math.log(2) / half_life
    keep = 1.0 if rate == 0.0 else math.exp(-rate * horizon)

    def moved_on(used: float, busy: float) -> float:
        """Use after the horizon holding `busy` (the meter's integral; `still_ahead`)."""
        if rate == 0.0:
            return used + busy * horizon
        return busy / rate + (used - busy / rate) * keep

    counted: Mapping[str, float] = tenancy.counted
    busy: dict[str, float] = {}
    served: dict[str, float] = {}
    for q in full.book.values():
        held = float(q.fitting)
        used = max(0.0, counted.get(q.name, 0.0))
        if q.name == s.name:
            served[q.name] = moved_on(used, k)
            busy[q.name] = k + (held - k) * keep
        else:
            served[q.name] = moved_on(used, held)
            busy[q.name] = held
    owed = tenancy.owed
    owing = full.owing
    owed_then = None
    if owed is not None:
        owes = (owing or {}).get(s.name, 0)
        owed_then = {s.name: moved_on(max(0.0, owed.get(s.name, 0.0)), owes)}
    return next_turn(
        [s],
        full.view.total_gpus,
        served,
        busy,  # type: ignore[arg-type]  # fractional GPUs: the math is the same
        half_life,
        owed_then,
        owing,
    )
