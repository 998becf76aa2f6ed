"""Larger recorded pass cases: generated snapshots of 200-300 nodes with 1,500-2,400
waiting jobs, and the decisions the code of main at 2a3b481 made on them.

`data/pass_decisions.json` (`pass_views.py`) holds small snapshots whole; a
pass at these sizes meets paths the small ones rarely do: similarity's
matching with thousands of (job, GPU type) pairs, many of them equal in
saving (jobs of one model without an estimate share the median work, a
model nobody measured saves nothing anywhere), a queue not in arrival order,
every type filling up; goodput's greedy and placing over thousands of jobs,
and one goodput object kept pass after pass (its kept weighing). So that
the file stays small, a case holds the generator's shape and seed, not the
snapshot: `schedulearn.sim.snapshots` rebuilds it, and a digest of the
snapshot's JSON (`pass_views.view_json`) says whether the generator still
draws the same one (if not, the case is void: the test says so; re-record
only with the old code).

`python tests/unit/core/larger_passes.py record` wrote the file, run with
main at 2a3b481's src first on the path (`PYTHONPATH=<that checkout>/src`),
before the pass speed-ups of branch pass-scale4 (issue 36, item 2).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from pass_views import decision_json, view_json

from schedulearn.core import ClusterView, Placement, Policy, create
from schedulearn.sim.snapshots import TYPES, Shape, scale_view

DATA = Path(__file__).parent / "data" / "pass_decisions_larger.json"

# goodput with its fairness named: the recorded code's default, 0.5 (0.25 since issue 34's
# stop 46), so the replay still compares like with like.
GOODPUT = "goodput:fairness=0.5"
POLICIES = ("fifo", "tiresias", "srtf", GOODPUT, "similarity", "defrag", "round-robin")
TYPED = ("similarity", "similarity:migrate=false", GOODPUT, "fifo")

# name -> (shape, seed, how the queue is handed over, policies)
CASES: dict[str, tuple[Shape, int, str, tuple[str, ...]]] = {
    "half": (Shape(nodes=240, pending=2400), 101, "", POLICIES),
    "elastic": (
        Shape(nodes=240, pending=2400, elastic_share=0.5, free_share=0.4), 102, "", POLICIES
    ),
    "hetero": (Shape(nodes=240, pending=2400, gpu_types=TYPES), 103, "", TYPED),
    "hetero-shuffled": (Shape(nodes=240, pending=2400, gpu_types=TYPES), 104, "shuffled", TYPED),
    "hetero-constrained": (
        Shape(nodes=240, pending=2400, gpu_types=TYPES, constrained=True, resources=True),
        105, "", TYPED,
    ),
    "hetero-starving": (
        Shape(nodes=240, pending=2400, gpu_types=TYPES, span=60_000.0, free_share=0.3),
        106, "", TYPED,
    ),
    "hetero-mostly-free": (
        Shape(nodes=300, gpus_per_node=4, pending=1500, gpu_types=TYPES, free_share=0.8),
        107, "", TYPED,
    ),
    "hetero-cpu": (
        Shape(nodes=240, pending=2400, gpu_types=TYPES, cpu_only=0.05, resources=True),
        108, "", TYPED,
    ),
    # Each type smaller than the biggest jobs: those may mix types.
    "hetero-tiny": (
        Shape(nodes=6, gpus_per_node=4, pending=300, gpu_types=TYPES, free_share=0.9),
        109, "", TYPED,
    ),
    "hetero-nearly-full": (
        Shape(nodes=240, pending=2400, gpu_types=TYPES, free_share=0.05), 110, "", TYPED
    ),
}  # fmt: skip

# name -> (shape, seed, policy, passes): one policy object decides pass after pass on
# the snapshot rebuilt as the live server rebuilds it (`rebuilt`).
SERIES: dict[str, tuple[Shape, int, str, int]] = {
    f"{GOODPUT}-kept": (Shape(nodes=240, pending=2400, elastic_share=0.3), 111, GOODPUT, 3),
    "similarity-kept": (Shape(nodes=240, pending=2400, gpu_types=TYPES), 112, "similarity", 3),
}


def case_view(shape: Shape, seed: int, how: str) -> ClusterView:
    view = scale_view(shape, seed)
    if how == "shuffled":
        pending = list(view.pending)
        random.Random(seed).shuffle(pending)
        view = replace(view, pending=tuple(pending))
    return view


def rebuilt(view: ClusterView, now: float) -> ClusterView:
    """`view` as the live server's next pass sees it: new node, GPU and running-job
    views, the same waiting views in a new tuple, the clock at `now`."""
    nodes = tuple(replace(n, gpus=tuple(replace(g) for g in n.gpus)) for n in view.nodes)
    running = tuple(
        replace(j, placement=Placement.of(j.placement.as_dict()) if j.placement else None)
        for j in view.running
    )
    return ClusterView(now, nodes, tuple([*view.pending]), running)


def digest(view: ClusterView) -> str:
    text = json.dumps(view_json(view), separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def decisions(policy: Policy, view: ClusterView) -> list[list[Any]]:
    return [decision_json(d) for d in policy.decide(view)]


def series(spec: str, view: ClusterView, passes: int) -> list[list[list[Any]]]:
    policy = create(spec)
    return [decisions(policy, rebuilt(view, view.now + 60.0 * k)) for k in range(passes)]


def record(path: Path = DATA) -> None:
    out: dict[str, Any] = {"cases": {}, "series": {}}
    for name, (shape, seed, how, policies) in CASES.items():
        view = case_view(shape, seed, how)
        out["cases"][name] = {
            "shape": asdict(shape),
            "seed": seed,
            "how": how,
            "digest": digest(view),
            "decisions": {spec: decisions(create(spec), view) for spec in policies},
        }
    for name, (shape, seed, spec, passes) in SERIES.items():
        view = case_view(shape, seed, "")
        out["series"][name] = {
            "shape": asdict(shape),
            "seed": seed,
            "digest": digest(view),
            "decisions": series(spec, view, passes),
        }
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        sys.exit("usage: python tests/unit/core/larger_passes.py record")
    record()
