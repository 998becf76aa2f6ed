"""The order in which the policy in force considers the pending jobs.

Owns the Queue page's ordering: pure functions over `core` views (no I/O).
Each built-in policy sorts its queue by its own rule (stated in its
module's docstring); this module applies the same keys the policies use,
through their public views (`JobView.remaining_at`, `deadline`,
`waiting_since`, `Tiresias.queue_of`), so the page shows the order of the
next pass. A third-party policy may expose `order(view) -> list[JobView]`
to be shown in its own order; otherwise the queue shows in arrival order
with a note saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schedulearn.core import ClusterView, JobView, Policy

_INF = float("inf")


@dataclass(frozen=True, slots=True)
class Ordered:
    """The pending jobs in the order the policy considers them, and the rule, in words."""

    jobs: list[JobView]
    rule: str
    exact: bool  # False: the policy does not state an order; shown in arrival order


def _arrival(view: ClusterView, _policy: Any) -> list[JobView]:
    # `ClusterView.pending` is already in arrival order (queued_at, id).
    return list(view.pending)


def _srtf(view: ClusterView, _policy: Any) -> list[JobView]:
    now = view.now

    def rank(j: JobView) -> tuple[bool, float, float, int]:
        remaining = j.remaining_at(now)
        return (remaining is None, remaining or 0.0, j.submitted_at, j.id)

    return sorted(view.pending, key=rank)


def _edf(view: ClusterView, _policy: Any) -> list[JobView]:
    dated = sorted(
        (j for j in view.pending if j.deadline is not None),
        key=lambda j: (j.deadline if j.deadline is not None else _INF, j.submitted_at, j.id),
    )
    return dated + [j for j in view.pending if j.deadline is None]


def _tiresias(view: ClusterView, policy: Any) -> list[JobView]:
    queue_of: Callable[[JobView, float], int] = policy.queue_of
    return sorted(view.pending, key=lambda j: (queue_of(j, view.now), j.submitted_at, j.id))


def _timeslice(view: ClusterView, _policy: Any) -> list[JobView]:
    return sorted(view.pending, key=lambda j: (j.waiting_since, j.submitted_at, j.id))


_RULES: dict[str, tuple[Callable[[ClusterView, Any], list[JobView]], str]] = {
    "fifo": (_arrival, "arrival order; the head of the queue waits for room"),
    "round-robin": (_arrival, "arrival order; servers take turns"),
    "elastic-fifo": (_arrival, "arrival order, each job at its minimum GPUs first"),
    "srtf": (_srtf, "shortest remaining estimated time first; jobs with no estimate last"),
    "edf": (_edf, "earliest deadline first; jobs with no deadline after, in arrival order"),
    "tiresias": (_tiresias, "least attained GPU-service queue first, arrival order inside one"),
    "timeslice": (_timeslice, "longest waiting first (since submission or last suspension)"),
    "tetris": (
        _arrival,
        "no fixed order: each pass starts the job whose demand best fits a node's free "
        "resources; shown in arrival order, which breaks ties",
    ),
}


def consideration_order(policy: Policy, view: ClusterView) -> Ordered:
    """Pending jobs in the order `policy` will consider them on its next pass."""
    custom = getattr(policy, "order", None)
    if callable(custom):
        return Ordered(list(custom(view)), "the policy's own order", True)
    known = _RULES.get(policy.name)
    if known is not None:
        order, rule = known
        return Ordered(order(view, policy), rule, policy.name != "tetris")
    return Ordered(
        _arrival(view, policy),
        f"{policy.name} does not state an order; shown in arrival order",
        False,
    )
