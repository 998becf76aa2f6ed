"""Pollux's 3-D interpolation of step times (`interpolation=delaunay`, issue 34)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from schedulearn.sim.interp3d import Delaunay3D
from schedulearn.sim.jobs import SimInputError
from schedulearn.sim.measured import MeasuredSpeed
from schedulearn.sim.runner import SpeedOptions, run_all
from schedulearn.sim.workloads.spec import parse_workload


def test_measured_points_come_back_as_measured(traces: Path) -> None:
    """At a point of the scalability table the interpolation is that row."""
    nd = Delaunay3D(traces / "pollux" / "apps" / "imagenet")
    rows = (traces / "pollux" / "apps" / "imagenet" / "scalability.csv").read_text().splitlines()
    header = rows[0].split(",")
    row = dict(zip(header, rows[len(rows) // 2].split(","), strict=True))
    got = nd(int(row["num_nodes"]), int(row["num_replicas"]), float(row["local_bsz"]))
    assert got == pytest.approx((float(row["step_time"]), float(row["sync_time"])))


def test_tiresias_as_in_the_artifact_gives_the_published_figure(traces: Path) -> None:
    """Workload 4, whose imagenet jobs run on more than 4 nodes: the artifact's own
    simulator gives 3,280.26 s; the separable interpolation 3,284.7 s."""
    (workload,) = parse_workload(str(traces / "pollux" / "workloads" / "workload-4.csv"))
    speed = SpeedOptions(artifact_time=True, interpolation="delaunay")
    (result,) = run_all([workload], ["tiresias:mode=artifact"], "16x4", speed, round_seconds=60)
    assert result.summary.mean_jct == pytest.approx(3280.26, abs=0.5)


def test_without_scipy_it_says_what_to_do(traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "scipy.interpolate", None)
    nd = Delaunay3D(traces / "pollux" / "apps" / "bert")
    with pytest.raises(SimInputError, match="pip install scipy"):
        nd(8, 32, 8.0)


def test_an_unknown_interpolation_is_refused(traces: Path) -> None:
    with pytest.raises(SimInputError, match="separable, delaunay"):
        MeasuredSpeed(traces / "pollux" / "apps", interpolation="cubic")
