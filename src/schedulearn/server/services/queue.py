"""The pending queue in the order of the policy in force: the Queue page and `show`.

Owns nothing; it reads the same `ClusterView` the scheduler hands the
policy (`snapshot.build`) and asks the policy in force for its order
(`core.queue_order`, the order its `decide` walks), so the Queue page,
`schedulearn show`'s queue position and its "jobs ahead" cannot disagree
with the policy. A stored spec that no longer builds (a third-party
policy uninstalled) is shown as fifo, the scheduler's own fallback; the
page still names the stored spec.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlmodel import Session

from schedulearn.core import ClusterView, JobView, Policy, QueueOrder, eligibility, queue_order
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import QueueShare, named, shares
from schedulearn.core.fairshare_reasons import share_reason
from schedulearn.server.errors import BadRequest
from schedulearn.server.models import Job
from schedulearn.server.services import policy as policy_service
from schedulearn.server.services import snapshot
from schedulearn.server.services.waiting import waiting_reason

FALLBACK = "fifo"


@dataclass(frozen=True, slots=True)
class Queue:
    """The pending jobs as the policy in force will consider them, with the view they came from."""

    spec: str
    order: QueueOrder
    view: ClusterView
    # Each queue's share in `view` (None: no queues), computed once for every reason.
    book: dict[str, QueueShare] | None = None
    # Held, waiting on a dependency, or over its array's limit: why such a job
    # waits whatever the resources (`eligibility.set_aside`), computed once.
    aside: dict[int, str] | None = None

    def ahead(self, index: int) -> int | None:
        """How many jobs the policy considers before the one at `index`; None when
        its order is not exact (the policy picks by fit, not by rank)."""
        return index if self.order.exact else None

    def reason(self, job: JobView, index: int) -> str:
        # Set aside first: it would not start even with every GPU free.
        if self.aside and job.id in self.aside:
            return self.aside[job.id]
        # Its queue's account next ("team-a uses 12 of its 8 guaranteed GPUs"):
        # the fair-share layer's own rule, judged on the same view.
        why = share_reason(self.view, job, self.book)
        if why is not None:
            return why.message
        return waiting_reason(job, self.view.nodes, self.ahead(index))


def policy_in_force(session: Session, default_policy: str) -> tuple[str, Policy]:
    """The stored spec and its policy in the fair-share layer, as the scheduler runs it
    (with queues, the order is queue by queue; without, the policy's own)."""
    spec = policy_service.current_spec(session, default_policy)
    try:
        return spec, FairShare(policy_service.build(spec))
    except BadRequest:
        return spec, FairShare(policy_service.build(FALLBACK))


def read(session: Session, default_policy: str, now: float) -> Queue:
    spec, policy = policy_in_force(session, default_policy)
    # A goodput-aware policy orders the queue by what jobs reported, as in a pass.
    view = snapshot.build(session, now, None, getattr(policy, "uses_goodput", False)).view
    book = shares(named(view), view.tenancy) if view.tenancy is not None else None
    return Queue(spec, queue_order(policy, view), view, book, eligibility.set_aside(view))


def reasons_of(
    session: Session, job_ids: Collection[int], default_policy: str, now: float
) -> dict[int, str]:
    """Why each pending job of `job_ids` waits, as `place_of` says it, from one read
    of the queue (the Jobs page's rows); jobs that are not pending are left out."""
    queue = read(session, default_policy, now)
    return {
        pending.id: queue.reason(pending, i)
        for i, pending in enumerate(queue.order.jobs)
        if pending.id in job_ids
    }


def place_of(session: Session, job: Job, default_policy: str, now: float) -> tuple[int, str]:
    """A pending job's position (1 = the policy considers it first) and why it waits."""
    queue = read(session, default_policy, now)
    for i, pending in enumerate(queue.order.jobs):
        if pending.id == job.id:
            return i + 1, queue.reason(pending, i)
    # Not in the queue just read (the row is not pending any more): last, order unknown.
    view = snapshot.job_view(job)
    return len(queue.order.jobs) + 1, waiting_reason(view, queue.view.nodes, None)
