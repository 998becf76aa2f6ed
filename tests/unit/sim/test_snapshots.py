"""The seeded cluster snapshots (`schedulearn.sim.snapshots`) that `bench/pass_scale.py`
times and `tests/unit/core/test_pass_replay.py` replays.

The replay reads its snapshots from JSON, so it cannot tell if the generator
drifts; these tests can: the generator must still make the recorded snapshots
(the bench's figures and the recorded cases describe the same clusters), and
every snapshot it makes is consistent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from schedulearn.core import GpuLedger, NodeView, Start
from schedulearn.sim.snapshots import TYPES, Shape, scale_view

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from pass_views import CASES, DATA, view_from


@pytest.mark.parametrize("case", ["half-free", "full", "resources", "hetero", "elastic", "stuck"])
def test_the_generator_still_makes_the_recorded_snapshots(case: str) -> None:
    shape, seed, _ = CASES[case]
    recorded = json.loads(DATA.read_text())[case]["view"]
    assert scale_view(shape, seed) == view_from(recorded)


def test_a_snapshot_is_consistent_and_has_the_shape_asked_for() -> None:
    shape = Shape(nodes=60, gpus_per_node=4, pending=200, free_share=0.25, gpu_types=TYPES)
    view = scale_view(shape, 3)
    assert view == scale_view(shape, 3)
    assert view != scale_view(shape, 4)
    assert len(view.nodes) == 60 and len(view.pending) == 200
    assert {n.gpu_type for n in view.nodes} == set(TYPES)
    # A quarter free, to within the few GPUs the last large jobs could not fill.
    assert 0.2 <= view.free_gpus / view.total_gpus <= 0.3
    # Every running job holds the GPUs the nodes say it holds, none twice.
    ledger = GpuLedger([NodeView.new(n.name, n.num_gpus, n.gpu_type) for n in view.nodes])
    starts = [Start(j.id, j.placement) for j in view.running if j.placement is not None]
    assert len(starts) == len(view.running)
    ledger.apply(starts, {j.id: j for j in view.running})
    for node in view.nodes:
        assert ledger.node_view(node.name) == node
    assert all(j.placement is None for j in view.pending)
