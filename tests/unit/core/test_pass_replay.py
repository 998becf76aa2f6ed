"""A faster pass decides exactly what the old pass decided (issue 36, item 2).

`data/pass_decisions.json` holds 20 seeded snapshots of 50-100 nodes with
120-500 waiting jobs (half free, full, nearly full, scattered free
GPUs, CPU and memory demands with labels and GPU types, three GPU types
for similarity's matching, exchanges and upgrades, elastic jobs for
goodput and elastic-fifo, unhealthy nodes, full clusters where nothing
may be preempted, with and without jobs of no GPUs) and, for every
built-in policy, the decisions the code of main at 3bde86d made on each,
recorded with that code (`pass_views.py` made them). The decisions of
srtf, timeslice and tiresias (the policies that preempt through
`core.preemption.make_room`) were recorded again for issue 32 item 2,
when making room began to empty one node for a job one node holds rather
than spread it; every other policy's decisions are the recorded ones.
Each policy is created fresh, as the live server creates one on a
switch, and replays every snapshot.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from pass_views import DATA, decide, view_from

from schedulearn.core import ClusterView


@cache
def _cases() -> dict[str, Any]:
    cases: dict[str, Any] = json.loads(DATA.read_text())
    return cases


@cache
def _view(case: str) -> ClusterView:
    return view_from(_cases()[case]["view"])


def _params() -> list[tuple[str, str]]:
    return [(case, spec) for case, data in _cases().items() for spec in data["decisions"]]


@pytest.mark.parametrize(("case", "spec"), _params())
def test_policy_decides_as_recorded(case: str, spec: str) -> None:
    recorded = _cases()[case]["decisions"][spec]
    assert decide(spec, _view(case)) == recorded


def test_the_recorded_cases_decide_something_and_nothing() -> None:
    """The cases cover passes that start jobs, preempt and resize, and passes that
    decide nothing (a full cluster), so an equal replay means something."""
    kinds = {d[0] for data in _cases().values() for ds in data["decisions"].values() for d in ds}
    assert kinds == {"start", "preempt", "resize"}
    assert _cases()["full"]["decisions"]["fifo"] == []
    assert len(_cases()["half-free"]["decisions"]["fifo"]) > 20
