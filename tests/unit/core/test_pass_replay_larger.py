"""A faster pass decides what the old pass decided, on larger snapshots (issue 36, item 2).

The cases of `larger_passes.py`: snapshots of 200-300 nodes with up to 2,400
waiting jobs, rebuilt from the seeded generator, and the decisions the code
of main at 2a3b481 made on them (before the speed-ups of branch
pass-scale4: similarity's matching sorted by saving alone over a queue in
arrival order, and goodput's greedy and placing). srtf's decisions on
the half and elastic cases were recorded again for issue 32 item 2
(`make_room` empties one node for a job one node holds). A series case keeps one
policy object pass after pass, as the live server does.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from larger_passes import DATA, case_view, decisions, digest, series

from schedulearn.core import ClusterView, create
from schedulearn.sim.snapshots import Shape


@cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text())
    return data


def _shape(fields: dict[str, Any]) -> Shape:
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    return Shape(**values)


@cache
def _view(kind: str, name: str) -> ClusterView:
    case = _data()[kind][name]
    view = case_view(_shape(case["shape"]), case["seed"], case.get("how", ""))
    assert digest(view) == case["digest"], (
        f"the generator (schedulearn.sim.snapshots) no longer draws case {name!r} as "
        "recorded: its decisions say nothing now; re-record with the old code"
    )
    return view


def _params() -> list[tuple[str, str]]:
    return [(name, spec) for name, case in _data()["cases"].items() for spec in case["decisions"]]


@pytest.mark.parametrize(("name", "spec"), _params())
def test_policy_decides_as_recorded(name: str, spec: str) -> None:
    recorded = _data()["cases"][name]["decisions"][spec]
    assert decisions(create(spec), _view("cases", name)) == recorded


@pytest.mark.parametrize("name", sorted(_data()["series"]))
def test_a_kept_policy_decides_pass_after_pass_as_recorded(name: str) -> None:
    case = _data()["series"][name]
    spec = name.split("-")[0]
    recorded = case["decisions"]
    assert series(spec, _view("series", name), len(recorded)) == recorded


def test_the_larger_cases_start_preempt_resize_and_mix() -> None:
    """The cases decide every kind of decision, and the shuffled queue is out of
    arrival order, so an equal replay covers the paths that changed."""
    cases = _data()["cases"]
    kinds = {d[0] for case in cases.values() for ds in case["decisions"].values() for d in ds}
    assert kinds == {"start", "preempt", "resize"}
    assert len(cases["hetero"]["decisions"]["similarity"]) > 200
    shuffled = _view("cases", "hetero-shuffled").pending
    since = [(j.waiting_since, j.id) for j in shuffled]
    assert since != sorted(since)
