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
zero at most once). Only the answers the pass asked for are followed:
until one of them turns, the pass asks and decides the same.

State: none; a function of one pass (its book and tenancy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from schedulearn.core.fairshare_fill import next_turn
from schedulearn.core.fairshare_queues import QueueShare
from schedulearn.core.fairshare_state import LEND_FOR, PassState


def next_lend_turn(full: PassState) -> float:
    """Seconds until an answer `full.lends` gave may turn with the jobs running
    now (inf if none can). Read after a pass that decided nothing: its book
    is the snapshot's, and `lends` still holds every answer the pass asked
    for (`PassState.lends_asked`, kept until the book moves). Only those can
    change what the pass does: until one turns, it asks the same and
    decides the same. (Every answer a queue could give, instead, turned
    on Philly's first 600 jobs under srtf at every few ticks, as a queue
    ahead grew, and took the replay from 1,572 passes to 7,377.)"""
    horizon = LEND_FOR * full.min_run
    if horizon <= 0:
        return math.inf  # it lends everything, always
    book = full.book
    soonest = math.inf
    for name, k in full.lends_asked:
        soonest = min(soonest, _turn(full, book[name], k, horizon))
    return soonest


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
        busy,  # fractional GPUs: the math is the same
        half_life,
        owed_then,
        owing,
    )
