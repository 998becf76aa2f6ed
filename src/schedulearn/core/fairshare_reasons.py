"""The fair-share layer's rules in words: why a job waits, whether it can ever start.

Pure functions over the same shares `core.fairshare` uses
(`fairshare_queues.shares`), for the host to show and to check with:

- `share_reason(view, job)`: why a pending job waits on account of the
  queues (`ShareReason`, with `message`), or None when it waits for some
  other reason (the policy's order, no node with room in one piece),
  which the host explains as before;
- `never_starts(tenancy, job, total_gpus)`: why a job could never start
  under the current queues and cluster, saying what to change (a submit
  refuses it), or None;
- `promised(queues)` and `overcommitted(queues, total_gpus)`: the GPUs the
  guarantees add up to, and the refusal of guarantees above the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from schedulearn.core.fairshare_fill import OWED_AT
from schedulearn.core.fairshare_queues import (
    DEFAULT_QUEUE,
    Queue,
    QueueShare,
    Tenancy,
    named,
    used_lately,
)
from schedulearn.core.fairshare_queues import shares as compute_shares
from schedulearn.core.views import ClusterView, JobView, rebuild

_EPS = 1e-9


class ShareRule(StrEnum):
    """Which queue rule holds the job back."""

    LIMIT = "limit"
    # Its queue holds its deserved share or more while other queues wait.
    OVER_SHARE = "over-share"
    # Its queue is below its guarantee: GPUs others borrowed come back to it
    # once their jobs have run the minimum time.
    RECLAIM = "reclaim"
    # Its queue is below its guarantee but not behind on its fraction of the
    # GPU-time lately: it takes nothing back until it falls behind.
    AHEAD = "ahead"
    # Too few GPUs are idle, and the busy ones are other queues' guarantees.
    HELD = "held"


@dataclass(frozen=True, slots=True)
class ShareReason:
    """A job waits because of what its queue, or the others, hold now."""

    rule: ShareRule
    queue: str
    used: int
    guaranteed: int
    share: float
    limit: int | None
    pinned: int = 0
    # The job's GPUs and the idle GPUs (HELD, RECLAIM).
    gpus: int = 0
    free: int = 0
    # Other queues: (name, GPUs in use, guaranteed GPUs), most held first;
    # those that borrowed beyond their guarantee (RECLAIM) or all (HELD).
    holders: tuple[tuple[str, int, int], ...] = ()
    # AHEAD: its share of the GPU-time used lately, and its guaranteed share;
    # and from a host that keeps it, its GPU-time over what it was owed.
    had: float = 0.0
    promised: float = 0.0
    of_owed: float | None = None

    @property
    def message(self) -> str:
        q = self.queue or DEFAULT_QUEUE
        if self.rule is ShareRule.LIMIT:
            return f"{q} uses {self.used} of its limit of {self.limit} GPUs"
        if self.rule is ShareRule.OVER_SHARE:
            return (
                f"{q} uses {self.used} of its {self.guaranteed} guaranteed GPUs "
                f"(its fair share now: {self.share:.0f}); other queues are waiting"
            )
        if self.rule is ShareRule.RECLAIM:
            who = ", ".join(f"{name} ({used - g})" for name, used, g in self.holders[:3])
            more = f" and {len(self.holders) - 3} more queues" if len(self.holders) > 3 else ""
            return (
                f"{q} uses {self.used} of its {self.guaranteed} guaranteed GPUs: it takes back "
                f"GPUs borrowed by {who}{more} once their jobs have run the minimum time"
            )
        if self.rule is ShareRule.AHEAD and self.of_owed is not None:
            return (
                f"{q} uses {self.used} of its {self.guaranteed} guaranteed GPUs but had "
                f"{self.of_owed:.0%} of the GPU-time it was owed lately, and "
                f"{self.had:.0%} of all used against its {self.promised:.0%}: it takes "
                f"nothing back until it falls below {OWED_AT:.0%} of what it is owed or "
                "the other queues catch up, and waits for idle GPUs"
            )
        if self.rule is ShareRule.AHEAD:
            return (
                f"{q} uses {self.used} of its {self.guaranteed} guaranteed GPUs but had "
                f"{self.had:.0%} of the GPU-time used lately against its {self.promised:.0%}: "
                "it takes nothing back until the other queues catch up, and waits for idle GPUs"
            )
        # "team-a holds 4 GPUs of its guarantee, team-b 2 (1 of its guarantee)"
        held = [
            (f"{name} holds {used} GPUs" if i == 0 else f"{name} {used}")
            + (" of its guarantee" if i == 0 and used <= g else "")
            + (f" ({g} of its guarantee)" if used > g else "")
            for i, (name, used, g) in enumerate(self.holders[:3])
        ]
        if len(self.holders) > 3:
            held.append(f"{len(self.holders) - 3} more queues hold theirs")
        who = ", ".join(held) if held else "other jobs hold them"
        return (
            f"needs {self.gpus} GPUs, {self.free} idle: not while {who} "
            f"({q} uses {self.used} of its {self.guaranteed} guaranteed)"
        )


def share_reason(
    view: ClusterView, job: JobView, book: dict[str, QueueShare] | None = None
) -> ShareReason | None:
    """Why `job` (pending in `view`) waits on account of the queues, or None.

    `book`: `shares(named(view), view.tenancy)` when the caller explains many
    jobs of one view (the Queue page), so that it is computed once.
    """
    tenancy = view.tenancy
    if tenancy is None or job.placement is not None:
        return None
    if not job.queue:
        job = rebuild(job, queue=DEFAULT_QUEUE)
    if book is None:
        book = compute_shares(named(view), tenancy)
    s = book.get(job.queue)
    if s is None:
        return None

    def reason(rule: ShareRule, **more: object) -> ShareReason:
        return ShareReason(
            rule,
            s.name,
            s.used,
            s.guaranteed,
            s.share,
            s.queue.limit,
            s.pinned,
            **more,  # type: ignore[arg-type]  # the optional fields, by name
        )

    if s.used + job.gpus > s.cap:
        return reason(ShareRule.LIMIT)
    others_wait = any(o.pending and o.name != s.name for o in book.values())
    beyond = s.used + job.gpus > max(float(s.guaranteed), s.share) + _EPS
    if beyond and others_wait and s.fitting >= s.guaranteed:
        return reason(ShareRule.OVER_SHARE)
    free = view.free_gpus
    if job.gpus <= free:
        return None
    others = [o for o in book.values() if o.name != s.name and o.used > 0]
    # What its guarantee protects: the GPUs of its jobs that fit it (`fitting`).
    if s.fitting + job.gpus <= s.guaranteed and s.ahead:
        served, owed = tenancy.counted, tenancy.owed
        mine = served.get(s.name, 0.0)
        of_owed = None
        if owed is not None:
            of_owed = mine / owed[s.name] if owed.get(s.name, 0.0) > 0 else 1.0
        return reason(
            ShareRule.AHEAD,
            gpus=job.gpus,
            free=free,
            had=mine / used_lately(served),
            promised=s.guaranteed / view.total_gpus,
            of_owed=of_owed,
        )
    if s.fitting + job.gpus <= s.guaranteed:
        lent = [o for o in others if o.used > o.guaranteed]
        if lent:
            lent.sort(key=lambda o: (o.guaranteed - o.used, o.name))
            holders = tuple((o.name, o.used, o.guaranteed) for o in lent)
            return reason(ShareRule.RECLAIM, gpus=job.gpus, free=free, holders=holders)
    others.sort(key=lambda o: (-o.used, o.name))
    holders = tuple((o.name, o.used, o.guaranteed) for o in others)
    return reason(ShareRule.HELD, gpus=job.gpus, free=free, holders=holders)


def never_starts(tenancy: Tenancy | None, job: JobView, total_gpus: int) -> str | None:
    """Why `job` can never start under `tenancy` on `total_gpus` healthy GPUs, or None.

    Any job may borrow idle GPUs beyond its queue's guarantee, so only its
    queue's limit, or the cluster's size, can rule it out for good.
    """
    if job.gpus > total_gpus:
        return (
            f"this job asks for {job.gpus} GPUs and the cluster has {total_gpus}; "
            f"ask for {total_gpus} or fewer"
        )
    if tenancy is None:
        return None
    name = job.queue or DEFAULT_QUEUE
    limit = tenancy.queue(name).limit
    if limit is not None and job.gpus > limit:
        return (
            f"queue {name} may hold at most {limit} GPUs (its limit) and this job asks for "
            f"{job.gpus}; ask for {limit} or fewer, or raise the limit "
            f"(schedulearn queue set {name} --limit {job.gpus})"
        )
    return None


def promised(queues: Iterable[Queue]) -> int:
    """The GPUs the queues' guarantees add up to."""
    return sum(q.guaranteed_gpus for q in queues)


def overcommitted(queues: Iterable[Queue], total_gpus: int) -> str | None:
    """Why these guarantees cannot all be kept on `total_gpus` GPUs, or None."""
    qs = list(queues)
    total = promised(qs)
    if total <= total_gpus:
        return None
    biggest = ", ".join(
        f"{q.name} {q.guaranteed_gpus}"
        for q in sorted(qs, key=lambda q: (-q.guaranteed_gpus, q.name))[:3]
        if q.guaranteed_gpus
    )
    return (
        f"the guarantees would add up to {total} GPUs and the cluster has {total_gpus} "
        f"({biggest}): when every queue wants its guarantee, some cannot have it; "
        "lower a guarantee, or pass --overcommit to accept that"
    )
