"""Each queue's deserved share and guarantee for one pass (`fill`), flat or as a tree.

Flat queues (the module doc of `fairshare_queues` has the rule): every
queue gets min(demand, guarantee), then the GPUs left are water-filled by
decayed weight over the queues that want more.

A queue tree (`Queue.parent`, e.g. `ml-vision` and `ml-nlp` under
`research`): the root queues share the cluster as above, a parent with
its whole subtree counted as one queue (its guarantee, and its
subtree's demand, usage and weight). Within a parent, what the subtree
got is split the same way among its children and its own jobs (which are
guaranteed what its children are not): children share their parent's
guarantee first, then the cluster's. The guarantee is split likewise: a
child may count as its own (`QueueShare.inherited`) the part of its
parent's guarantee that its siblings do not need now, so it keeps that
part against other teams, and gives it back to a sibling whose jobs
arrive (the sibling is then below its guarantee and reclaims it). GPUs
are whole: a child inherits whole GPUs.

`check_tree` refuses a tree that cannot be kept. `AHEAD_AT`, `OWED_AT` and
`mark_ahead` say which queues are behind on their guaranteed fraction of
the GPU-time lately or on the GPU-time they were owed (the over-time rule
of `core.fairshare`); `stranded`, which waiting jobs may take GPUs of a
queue behind all the same.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schedulearn.core.fairshare_queues import Queue, QueueShare
    from schedulearn.core.views import JobView

_EPS = 1e-9

# The share of its guaranteed fraction of the GPU-time used lately below
# which a queue is behind, and only then protected: a queue near its
# fraction competes under the policy in force as it would without queues
# (whose order serves short jobs and slowdowns best); one clearly short-
# changed gets its guarantee back. Measured on Philly windows
# (docs/results.md 7): 1.05 (protect every queue not over its fraction)
# cost tiresias x1.7 mean JCT and Jain 0.24 against 0.71; 0.8 gave x1.01
# and Jain 0.78.
AHEAD_AT = 0.8


def split_shares(
    qs: list[QueueShare],
    capacity: int,
    usage: Mapping[str, float],
    served: Mapping[str, float],
    owed: Mapping[str, float] | None = None,
) -> None:
    """Set each queue's `share` (and in a tree, `inherited`) and `ahead`:
    guarantees first, then weighted water-filling by `usage` (module doc);
    `ahead` on `served` (`Tenancy.served`).

    `qs` holds every declared queue, their `uncovered` GPUs already set.
    """
    for s in qs:
        s.inherited = 0
    roots = _tree(qs, usage)
    if roots is None:
        mark_ahead(qs, capacity, served, owed)
        shares = water(
            capacity,
            [float(min(s.demand, s.guaranteed)) for s in qs],
            [s.demand for s in qs],
            decayed([s.queue.weight for s in qs], [usage.get(s.name, 0.0) for s in qs]),
        )
        for s, got in zip(qs, shares, strict=True):
            s.share = got
        return
    for part in roots:
        part.inherit(part.guaranteed)
    mark_ahead(qs, capacity, served, owed)
    _split(roots, float(capacity))


def water(
    amount: float, floors: list[float], demands: list[int], weights: list[float]
) -> list[float]:
    """What each of a group gets of `amount`: its floor, then the rest by weight,
    never beyond its demand (what it cannot take goes to the others)."""
    got = list(floors)
    left = float(amount)
    for f in floors:
        left -= f
    wanting = [i for i in range(len(got)) if demands[i] > got[i] + _EPS]
    while left > _EPS and wanting:
        total = sum(weights[i] for i in wanting)
        still: list[int] = []
        given = 0.0
        for i in wanting:
            offer = left * weights[i] / total
            need = demands[i] - got[i]
            if need <= offer + _EPS:
                got[i] += need
                given += need
            else:
                still.append(i)
        if len(still) == len(wanting):
            for i in still:
                got[i] += left * weights[i] / total
            return got
        left -= given
        wanting = still
    return got


def decayed(weights: list[float], usages: list[float]) -> list[float]:
    """Each weight scaled by Slurm's classic fair-share factor,
    `2 ** -(usage share / weight share)`, within the group."""
    total_usage = sum(max(0.0, u) for u in usages)
    total_weight = sum(weights)
    out = []
    for w, u in zip(weights, usages, strict=True):
        if total_usage <= 0:
            out.append(w)
            continue
        used_share = max(0.0, u) / total_usage
        out.append(w * 2.0 ** (-used_share / (w / total_weight)))
    return out


def used_lately(usage: Mapping[str, float]) -> float:
    """Every queue's decayed usage together: what guaranteed fractions are of."""
    return sum(u for u in usage.values() if u > 0)


# The share of the GPU-time it was owed lately (`Tenancy.owed`) below which a
# queue is behind (as below `AHEAD_AT` of its fraction), and so protected: a
# queue served what its guarantee alone would have given it, or nearly, lends
# like a borrower, and its use of the guarantee while the cluster was
# otherwise idle is what it was owed, not credit. Measured on the bench's 9
# cells of 5,000 Philly jobs and on 20,000 (docs/results.md 7, stop 45):
# 0.75 lowered the worst sharing-incentive ratio (mean 1.268 to 1.201) at
# about the same mean JCT and Jain; 0.85 lowered it more on 5,000 jobs but
# cost srtf x1.37 mean JCT (against x1.15) on 20,000. On the owed mark alone
# a queue back from idle kept its old standing and did not take its
# guarantee back (tests/e2e/test_live_fair_share.py).
OWED_AT = 0.75


def _marks(guaranteed: int, capacity: int, by_owed: bool) -> list[tuple[float, float]]:
    """The marks a queue must be at to be ahead, each as (a, m): S >= a * (all S)
    + m * O (S its served use, O what it was owed). Always its guaranteed
    fraction of all use (`AHEAD_AT`), so a queue back from idle, whose share of
    the use fell while others ran, is behind; and, from a host that keeps the
    figure, what it was owed (`OWED_AT`), so its use of the guarantee while
    the cluster was otherwise idle is no credit."""
    fraction = (AHEAD_AT * guaranteed / capacity if capacity > 0 else 0.0, 0.0)
    return [fraction, (0.0, OWED_AT)] if by_owed else [fraction]


def _is_ahead(
    mine: float, total: float, owed: float | None, guaranteed: int, capacity: int
) -> bool:
    """`mark_ahead`'s rule for one queue (`owed` None: the host keeps no such figure).
    A queue never served is behind: its first jobs are protected."""
    if not total > 0 or (owed is not None and not mine > 0):
        return False
    for a, m in _marks(guaranteed, capacity, owed is not None):
        if mine < a * total + m * (owed or 0.0) - _EPS:
            return False
    return True


def mark_ahead(
    qs: list[QueueShare],
    capacity: int,
    served: Mapping[str, float],
    owed: Mapping[str, float] | None = None,
) -> None:
    """Set `ahead`: decayed use (`served`: of jobs that fit their queue's guarantee,
    `Tenancy.served`) at least `AHEAD_AT` of its guaranteed fraction of all use
    and, from a host that keeps the figure, `OWED_AT` of what the queue was
    owed (`owed`, `Tenancy.owed`)."""
    total = used_lately(served)
    for s in qs:
        s.ahead = _is_ahead(
            max(0.0, served.get(s.name, 0.0)),
            total,
            None if owed is None else max(0.0, owed.get(s.name, 0.0)),
            s.guaranteed,
            capacity,
        )


def still_ahead(
    name: str,
    qs: Iterable[QueueShare],
    capacity: int,
    served: Mapping[str, float],
    busy: Mapping[str, int],
    half_life: float | None,
    after: float,
    owed: Mapping[str, float] | None = None,
    owing: Mapping[str, int] | None = None,
) -> bool:
    """Would queue `name` still be ahead (`mark_ahead`) `after` seconds from
    now, if each queue went on holding `busy` GPUs of jobs that fit its
    guarantee? (Its margin crosses zero at most once: `next_turn`.)"""
    rate = 0.0 if half_life is None else math.log(2) / half_life
    fade = math.exp(-rate * after)

    def later(s: float, b: int) -> float:
        return s + b * after if rate == 0.0 else b / rate + (s - b / rate) * fade

    total, mine, guaranteed = 0.0, 0.0, 0
    for q in qs:
        s = later(max(0.0, served.get(q.name, 0.0)), busy.get(q.name, 0))
        total += s
        if q.name == name:
            mine, guaranteed = s, q.guaranteed
    o = None
    if owed is not None:
        o = later(max(0.0, owed.get(name, 0.0)), (owing or {}).get(name, 0))
    return _is_ahead(mine, total, o, guaranteed, capacity)


def next_turn(
    qs: Iterable[QueueShare],
    capacity: int,
    served: Mapping[str, float],
    busy: Mapping[str, float],
    half_life: float | None,
    owed: Mapping[str, float] | None = None,
    owing: Mapping[str, int] | None = None,
) -> float:
    """Seconds until the first queue turns from ahead to behind or back
    (`mark_ahead`), if each queue goes on holding `busy` GPUs of jobs that fit
    its guarantee and is owed `owing` GPUs (`QueueShare.owing`); inf if none
    ever does. (A host that skips ticks must not skip the one at which a
    queue falls behind: `FairShare.steady_until`.)

    A queue's served use follows dS/dt = busy - r S (r = ln 2 / half-life),
    so S(t) = busy/r + (S - busy/r) e^(-rt), and what it was owed likewise;
    its margin over its mark, S_q - a_q (sum of every S_p) - m O_q
    (`_marks`), is then A + D e^(-rt), which crosses zero at most once (a
    straight line without decay).
    """
    rate = 0.0 if half_life is None else math.log(2) / half_life
    total = used_lately(served)
    total_busy = sum(busy.values())
    by_owed = owed is not None
    if total <= 0:
        return 0.0 if total_busy > 0 else math.inf  # every queue is behind until use begins
    owed = owed or {}
    owing = owing or {}
    soonest = math.inf
    for s in qs:
        mine = max(0.0, served.get(s.name, 0.0))
        b = busy.get(s.name, 0)
        if by_owed and mine <= 0:
            if b > 0:
                return 0.0  # never served, it turns ahead at once (`_is_ahead`)
            continue
        for a, m in _marks(s.guaranteed, capacity, by_owed):
            now = mine - a * total - m * max(0.0, owed.get(s.name, 0.0))
            gain = b - a * total_busy - m * owing.get(s.name, 0)
            if rate == 0.0:
                at = -now / gain if gain != 0.0 else math.inf
            else:
                # margin(t) = A + D e^(-rt), with A + D = now and A = gain / r.
                steady = gain / rate
                moving = now - steady
                at = (
                    -math.log(-steady / moving) / rate
                    if moving != 0.0 and 0 < -steady / moving < 1
                    else math.inf
                )
            if at > 0:
                soonest = min(soonest, at)
    return soonest


def stranded(s: QueueShare, job: JobView, now: float, min_run: float) -> bool:
    """May waiting `job` of queue `s` take GPUs of a queue that is behind (from
    jobs that have run `min_run`), which no other job may?

    Only a job that can run on borrowed GPUs only (`QueueShare.only_borrows`)
    and is expected to end within `min_run` (`JobView.remaining_at`). No
    guarantee ever holds GPUs for such a job, so on a cluster whose
    guarantees are all in use it would wait until queues ahead happened to
    lend enough at once: on the first 5,000 Philly jobs under srtf on 40
    GPUs, three 16-GPU jobs of about 40 s of a team guaranteed 6 waited 2
    to 3 days, and their slowdowns (4,000-6,000) alone took Jain's index
    over the teams' slowdowns from 0.71 to 0.18; with the 2-GPU jobs of
    seconds of teams guaranteed none, 0.65 against 0.65 plain now
    (docs/queues.md). It gives the GPUs back before a reclaim could take
    them, so the queue behind loses at most `min_run` on each GPU; an
    estimate that is too short buys no more, as after `min_run` the job is
    a borrower any reclaim may take.
    """
    left = job.remaining_at(now)
    return left is not None and left <= min_run + _EPS and s.only_borrows(job)


# --- queue trees -------------------------------------------------------------


@dataclass(slots=True)
class _Part:
    """A queue's own jobs (`own`), or a parent's subtree (`members`), in one split."""

    guaranteed: int
    demand: int
    weight: float
    usage: float
    own: QueueShare | None = None
    members: list[_Part] = field(default_factory=list)

    def inherit(self, gpus: int) -> None:
        """This part is guaranteed `gpus` now: pass them down (module doc)."""
        if self.own is not None:
            s = self.own
            s.inherited = gpus - s.guaranteed
            return
        got = water(
            gpus,
            [float(min(m.demand, m.guaranteed)) for m in self.members],
            [m.demand for m in self.members],
            _weights(self.members),
        )
        for m, g in zip(self.members, got, strict=True):
            m.inherit(max(m.guaranteed, math.floor(g + _EPS)))


def _tree(qs: list[QueueShare], usage: Mapping[str, float]) -> list[_Part] | None:
    """The root parts of a queue tree, or None when no queue has a parent."""
    children: dict[str, list[QueueShare]] = {}
    for s in qs:
        if s.queue.parent is not None:
            children.setdefault(s.queue.parent, []).append(s)
    if not children:
        return None

    def part(s: QueueShare) -> _Part:
        mine = children.get(s.name)
        u = max(0.0, usage.get(s.name, 0.0))
        if not mine:
            return _Part(s.guaranteed, s.demand, s.queue.weight, u, own=s)
        kids = [part(c) for c in mine]
        own = _Part(
            s.guaranteed - sum(c.queue.guaranteed_gpus for c in mine),
            s.demand,
            s.queue.weight,
            u,
            own=s,
        )
        members = [own, *kids]
        return _Part(
            s.guaranteed,
            sum(m.demand for m in members),
            s.queue.weight,
            sum(m.usage for m in members),
            members=members,
        )

    return [part(s) for s in qs if s.queue.parent is None]


def _weights(parts: list[_Part]) -> list[float]:
    return decayed([p.weight for p in parts], [p.usage for p in parts])


def _split(parts: list[_Part], amount: float) -> None:
    """Share `amount` GPUs among `parts` and on down their subtrees."""
    got = water(
        amount,
        [float(min(p.demand, p.guaranteed)) for p in parts],
        [p.demand for p in parts],
        _weights(parts),
    )
    for p, share in zip(parts, got, strict=True):
        if p.own is not None:
            p.own.share = share
        else:
            _split(p.members, share)


def check_tree(by_name: Mapping[str, Queue], default: str) -> None:
    """Refuse a queue tree that cannot be kept, saying what to change."""
    promised: dict[str, int] = {}
    for q in by_name.values():
        if q.parent is None:
            continue
        parent = by_name.get(q.parent)
        if parent is None:
            raise ValueError(
                f"queue {q.name!r}: its parent {q.parent!r} is not a queue; "
                "create the parent first or give no parent"
            )
        if default in (q.name, parent.name):
            raise ValueError(
                f"queue {q.name!r}: the {default!r} queue (jobs that name no queue) "
                "owns the GPUs no guarantee covers and stays out of queue trees"
            )
        if q.typed or parent.typed:
            raise ValueError(
                f"queue {q.name!r}: guarantees of one GPU type are not supported in a "
                "queue tree; guarantee GPUs of any type to the parent and its children"
            )
        if parent.limit is not None:
            raise ValueError(
                f"queue {parent.name!r} has children and a limit: limits apply to a "
                "queue's own jobs, so set them on the children instead"
            )
        seen = {q.name}
        up: Queue | None = parent
        while up is not None:
            if up.name in seen:
                raise ValueError(f"queue {q.name!r}: its parents form a loop through {up.name!r}")
            seen.add(up.name)
            up = by_name.get(up.parent) if up.parent is not None else None
        promised[parent.name] = promised.get(parent.name, 0) + q.guaranteed_gpus
    for name, gpus in promised.items():
        own = by_name[name].guaranteed_gpus
        if gpus > own:
            raise ValueError(
                f"the children of queue {name!r} are guaranteed {gpus} GPUs together, more "
                f"than its {own}; raise {name!r}'s guarantee or lower theirs"
            )
