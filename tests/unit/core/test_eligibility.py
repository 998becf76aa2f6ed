"""`core.eligibility`: held jobs, array limits and drained nodes, for every policy.

Each registered policy decides on `schedulable(view)`; whatever it is, no
held job starts, an array never has more tasks running than its limit,
and nothing is placed on a drained node.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from schedulearn.core import ClusterView, JobView, NodeView, Placement, Start, available, create
from schedulearn.core.eligibility import schedulable, set_aside

POLICIES = available()


def _job(job_id: int, **kw: Any) -> JobView:
    return JobView(id=job_id, submitted_at=float(job_id), gpus=1, **kw)


def _view(
    pending: list[JobView], running: list[JobView] | None = None, drained: str = ""
) -> ClusterView:
    nodes = tuple(replace(NodeView.new(name, 4), drained=name == drained) for name in ("n0", "n1"))
    return ClusterView(now=100.0, nodes=nodes, pending=tuple(pending), running=tuple(running or ()))


@pytest.mark.parametrize("spec", POLICIES)
def test_no_policy_runs_more_array_tasks_than_the_limit(spec: str) -> None:
    running = [_job(1, array_id=1, array_limit=3, placement=Placement.of({"n0": (0,)}))]
    pending = [_job(i, array_id=1, array_limit=3) for i in range(2, 9)]
    decisions = create(spec).decide(schedulable(_view(pending, running)))
    started = {d.job_id for d in decisions if isinstance(d, Start)}
    assert len(started) <= 2
    assert started <= {2, 3}  # the lowest ids get the slots


@pytest.mark.parametrize("spec", POLICIES)
def test_no_policy_starts_a_held_job_or_uses_a_drained_node(spec: str) -> None:
    pending = [_job(1, held=True), _job(2), _job(3)]
    decisions = create(spec).decide(schedulable(_view(pending, drained="n1")))
    starts = [d for d in decisions if isinstance(d, Start)]
    assert 1 not in {d.job_id for d in starts}
    assert all(name == "n0" for d in starts for name, _ in d.placement)


def test_set_aside_says_why() -> None:
    running = [_job(1, array_id=1, array_limit=1, placement=Placement.of({"n0": (0,)}))]
    aside = set_aside(_view([_job(2, array_id=1, array_limit=1), _job(3, held=True)], running))
    assert "limit (%1)" in aside[2] and "array 1" in aside[2]
    assert "held" in aside[3]


def test_a_view_with_nothing_to_set_aside_is_returned_as_is() -> None:
    view = _view([_job(1), _job(2, array_id=2, array_limit=5)])
    assert schedulable(view) is view
