"""Why a job waits on its queue's account: the fair-share layer's rules in words.

`share_reason(view, job)` judges a pending job against the same shares
`core.fairshare` uses (`fairshare_queues.shares`) and returns a
`ShareReason` when the job waits because of its queue (at its limit,
over its guarantee and fair share while others wait, or a
non-preemptible job beyond the guarantee), else None: the job then waits
for some other reason (no room, the policy's order), which the host
explains as before. `schedulearn show` and the Queue page use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from schedulearn.core.fairshare_queues import DEFAULT_QUEUE, QueueShare, named, shares
from schedulearn.core.views import ClusterView, JobView, rebuild


class ShareRule(StrEnum):
    """Which queue rule holds the job back."""

    LIMIT = "limit"
    OVER_SHARE = "over-share"
    PINNED = "non-preemptible"


@dataclass(frozen=True, slots=True)
class ShareReason:
    """A job waits because its queue has what it may have now."""

    rule: ShareRule
    queue: str
    used: int
    guaranteed: int
    share: float
    limit: int | None
    pinned: int = 0

    @property
    def message(self) -> str:
        q = self.queue or "default"
        if self.rule is ShareRule.LIMIT:
            return f"{q} uses {self.used} of its limit of {self.limit} GPUs"
        if self.rule is ShareRule.PINNED:
            return (
                f"{q}'s non-preemptible jobs use {self.pinned} of its {self.guaranteed} "
                "guaranteed GPUs; a non-preemptible job runs only within the guarantee"
            )
        return (
            f"{q} uses {self.used} of its {self.guaranteed} guaranteed GPUs "
            f"(its fair share now: {self.share:.0f}); other queues are waiting"
        )


def share_reason(
    view: ClusterView, job: JobView, book: dict[str, QueueShare] | None = None
) -> ShareReason | None:
    """Why `job` (pending in `view`) waits on its queue's account, or None.

    `book`: `shares(named(view), view.tenancy)` when the caller explains many
    jobs of one view (the Queue page), so that it is computed once.
    """
    tenancy = view.tenancy
    if tenancy is None or job.placement is not None:
        return None
    if not job.queue:
        job = rebuild(job, queue=DEFAULT_QUEUE)
    if book is None:
        book = shares(named(view), tenancy)
    s = book[job.queue]

    def reason(rule: ShareRule) -> ShareReason:
        return ShareReason(rule, s.name, s.used, s.guaranteed, s.share, s.queue.limit, s.pinned)

    if s.used + job.gpus > s.cap:
        return reason(ShareRule.LIMIT)
    if not job.preemptible and s.pinned + job.gpus > s.guaranteed:
        return reason(ShareRule.PINNED)
    others_wait = any(o.pending and o.name != s.name for o in book.values())
    beyond = s.used + job.gpus > max(float(s.guaranteed), s.share) + 1e-9
    if beyond and others_wait and s.used >= s.guaranteed:
        return reason(ShareRule.OVER_SHARE)
    return None
