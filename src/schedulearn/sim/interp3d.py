"""Step times of placements no table measured, interpolated in 3-D as Pollux's simulator does.

Pollux's artifact (petuum/adaptdl, branch `osdi21-artifact`,
`simulator/applications.py`, `get_throughput`) looks a placement it has
no row for up in one scattered-data interpolation over (nodes, GPUs,
local batch): the placement table's rows averaged per such point (in
sorted order), followed by the scalability table's rows, triangulated
(Delaunay) and interpolated linearly, with the node count capped at 16.
This module rebuilds that point set from the same files and
interpolates with scipy's `LinearNDInterpolator`, the routine the
artifact calls, so that a run under `MeasuredSpeed(interpolation=
"delaunay")` takes the artifact's step times (issue 34: it made
`tiresias:mode=artifact` exact on the 8 workloads). The simulator's
default, `separable`, needs nothing outside the standard library;
this one imports scipy when first used and says how to get it.

It owns one interpolator per application and the values it returned.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from schedulearn.sim.jobs import SimInputError

MAX_NODES = 16  # the artifact caps the node count at its cluster's


def _load_scipy() -> Any:
    try:
        from scipy.interpolate import LinearNDInterpolator  # type: ignore[import-untyped]
    except ImportError:
        raise SimInputError(
            "the 3-D (delaunay) interpolation of step times needs scipy: "
            "pip install scipy, or use the default separable interpolation"
        ) from None
    return LinearNDInterpolator


class Delaunay3D:
    """(step time, sync time) at (nodes, GPUs, local batch), or None outside the hull."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._interp: Any = None
        self._memo: dict[tuple[int, int, float], tuple[float, float] | None] = {}

    def _build(self) -> Any:
        # Imported here: `measured` imports this module.
        from schedulearn.sim.measured import read_columns

        groups: dict[tuple[int, int, float], list[tuple[float, float]]] = {}
        placements = ("placement", "local_bsz", "step_time", "sync_time")
        for p, bsz, step, sync in read_columns(self.directory / "placements.csv", placements):
            counts = [int(c) for c in p]
            key = (len(counts), sum(counts), float(bsz))
            groups.setdefault(key, []).append((float(step), float(sync)))
        points: list[tuple[float, float, float]] = []
        values: list[tuple[float, float]] = []
        for key in sorted(groups):
            rows = groups[key]
            points.append((float(key[0]), float(key[1]), key[2]))
            values.append(
                (sum(r[0] for r in rows) / len(rows), sum(r[1] for r in rows) / len(rows))
            )
        scalability = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
        path = self.directory / "scalability.csv"
        if path.is_file():
            for n, r, bsz, step, sync in read_columns(path, scalability):
                points.append((float(n), float(r), float(bsz)))
                values.append((float(step), float(sync)))
        return _load_scipy()(points, values)

    def __call__(self, nodes: int, gpus: int, local_bsz: float) -> tuple[float, float] | None:
        key = (min(nodes, MAX_NODES), gpus, float(local_bsz))
        if key in self._memo:
            return self._memo[key]
        if self._interp is None:
            self._interp = self._build()
        step, sync = (float(v) for v in self._interp([list(key)])[0])
        got = None if math.isnan(step) or math.isnan(sync) else (step, sync)
        self._memo[key] = got
        return got
