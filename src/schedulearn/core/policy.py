"""The contract every scheduling policy meets, and the order it considers the queue in.

A policy reads a `ClusterView` and returns decisions. It does no I/O and
reads no clock: time is `view.now`. The same object is driven by the
simulator and by the live scheduler loop.

A policy also says in which order it will consider the pending jobs on
its next pass (`order`), so that the Queue page, `schedulearn show`'s
queue position and its "jobs ahead" are the policy's own order and not a
copy of its rule that could drift. The built-in policies walk the queue
in exactly that order in `decide`. `queue_order` gives the order of any
policy, including a third-party one written before `order` existed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from schedulearn.core.decisions import Decision
from schedulearn.core.views import ClusterView, JobView


@dataclass(frozen=True, slots=True)
class QueueOrder:
    """The pending jobs in the order a policy considers them on its next pass.

    `rule` states the order in words (the Queue page shows it). `exact`
    is False when the policy has no fixed order (it picks the next job by
    how well it fits, as tetris does) or does not state one: the jobs are
    then listed in arrival order, which is at most a tie-break, and a
    job's place in the list says little about when it starts.
    """

    jobs: tuple[JobView, ...]
    rule: str
    exact: bool = True

    def position(self, job_id: int) -> int | None:
        """The job's place in the order, 1 for the first; None if it is not pending."""
        for i, job in enumerate(self.jobs):
            if job.id == job_id:
                return i + 1
        return None


@runtime_checkable
class Policy(Protocol):
    """A scheduling policy.

    `name` is the registry key. `tick_seconds` asks the host to call
    `decide` at least that often while jobs wait or run, for policies
    whose choices change with time alone (quanta, attained service);
    None means "only when something happens". `order` lists
    `view.pending` in the order `decide` will consider them.
    """

    name: ClassVar[str]
    tick_seconds: ClassVar[float | None]

    def order(self, view: ClusterView) -> QueueOrder: ...

    def decide(self, view: ClusterView) -> list[Decision]: ...


def arrival_order(view: ClusterView, rule: str, exact: bool = True) -> QueueOrder:
    """The pending jobs as the view lists them: arrival order (queue time, then id)."""
    return QueueOrder(view.pending, rule, exact)


def queue_order(policy: object, view: ClusterView) -> QueueOrder:
    """The order `policy` will consider `view.pending` in on its next pass.

    A policy without `order` (a third-party one written before it
    existed) gets arrival order, marked as not exact. One whose `order`
    returns a plain list of jobs is taken at its word. Pending jobs the
    policy's order leaves out are added after it in arrival order (then
    the order is not exact), so that no waiting job disappears from the
    Queue page.
    """
    name = str(getattr(policy, "name", type(policy).__name__))
    method = getattr(policy, "order", None)
    if not callable(method):
        return arrival_order(view, f"{name} does not state an order; shown in arrival order", False)
    given = method(view)
    if isinstance(given, QueueOrder):
        result = given
    else:
        result = QueueOrder(tuple(given), f"{name}'s own order")
    return _complete(result, view.pending)


def _complete(order: QueueOrder, pending: Iterable[JobView]) -> QueueOrder:
    listed = {job.id for job in order.jobs}
    missing = tuple(job for job in pending if job.id not in listed)
    if not missing:
        return order
    return QueueOrder(order.jobs + missing, f"{order.rule}; others in arrival order", False)
