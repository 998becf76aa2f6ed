"""The recorded pass cases, and a compact JSON form of a snapshot and its decisions.

`test_pass_replay.py` replays the snapshots recorded in
`data/pass_decisions.json` through today's policies and asserts the
decisions recorded with the code of main at 3bde86d, before the pass
was made faster (issue 36): a speed-up may change no decision. The
snapshots come from the seeded generator `schedulearn.sim.snapshots`
(which `bench/pass_scale.py` times a pass on, at 1,000 nodes).

`python tests/unit/core/pass_views.py record` wrote that file, run with
main at 3bde86d's core first on the path (`PYTHONPATH=<that checkout>/src`;
the generator lived in this file then);
the cases added later were recorded the same way. It is kept to show how
the cases were made (`CASES`), not to be rerun with a changed policy: the
recorded decisions are the old code's. (Rerun with today's code, it must
write the same file, which is what the test checks.)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from schedulearn.core import (
    ClusterView,
    Decision,
    GpuLedger,
    JobView,
    NodeView,
    Placement,
    Preempt,
    Start,
    create,
)
from schedulearn.core.capabilities import NodeCapabilities
from schedulearn.sim.snapshots import TYPES, Shape, scale_view

DATA = Path(__file__).parent / "data" / "pass_decisions.json"


# --- the recorded cases ---------------------------------------------------------------

# name -> (shape, seed, policies). Every policy on the default shapes; similarity's
# cases add GPU types, goodput's elastic ranges.
# goodput with its fairness named: the recorded code's default, 0.5 (0.25 since issue 34's
# stop 46), so the replay still compares like with like.
ALL: tuple[str, ...] = (
    "fifo", "fifo:backfill=true", "tiresias", "srtf", "goodput:fairness=0.5", "similarity",
    "defrag",
    "round-robin", "edf", "tetris", "elastic-fifo", "timeslice",
)  # fmt: skip
CASES: dict[str, tuple[Shape, int, tuple[str, ...]]] = {
    "half-free": (Shape(pending=500), 1, ALL),
    "full": (Shape(pending=500, free_share=0.0), 2, ALL),
    "nearly-full": (Shape(free_share=0.03), 3, ALL),
    "mostly-free": (Shape(free_share=0.9, pending=120), 4, ALL),
    "scattered": (Shape(free_share=0.35, unhealthy=3), 5, ALL),
    "resources": (Shape(resources=True, constrained=True, unhealthy=2), 6, ALL),
    "hetero": (Shape(gpu_types=TYPES, constrained=True), 7, ALL),
    "hetero-full": (Shape(gpu_types=TYPES, free_share=0.0), 8, ALL),
    "hetero-starving": (Shape(gpu_types=TYPES, span=60_000.0, free_share=0.2), 9, ALL),
    "elastic": (Shape(elastic_share=0.5), 10, ALL),
    "elastic-full": (Shape(elastic_share=0.5, free_share=0.0), 11, ALL),
    "small-nodes": (Shape(nodes=100, gpus_per_node=4, pending=400, free_share=0.4), 12, ALL),
    # Recorded later, with the same code (main at 3bde86d): full clusters where
    # nothing can be preempted, with and without jobs of no GPUs.
    "stuck": (Shape(free_share=0.0, preemptible=0.0), 13, ALL),
    "stuck-cpu": (Shape(free_share=0.0, preemptible=0.0, resources=True, cpu_only=0.05), 14, ALL),
    "stuck-hetero": (Shape(gpu_types=TYPES, free_share=0.0, preemptible=0.0), 15, ALL),
    # More GPU-type cases, for similarity's exchanges and upgrades (same code).
    "hetero-b": (Shape(gpu_types=TYPES, free_share=0.6), 16, ALL),
    "hetero-c": (Shape(gpu_types=TYPES, nodes=90, gpus_per_node=4, free_share=0.4), 17, ALL),
    "hetero-d": (Shape(gpu_types=TYPES, span=8_000.0, free_share=0.3, pending=150), 18, ALL),
    "hetero-e": (Shape(gpu_types=TYPES, free_share=0.3, pending=150), 26, ALL),
    "hetero-f": (Shape(gpu_types=TYPES, span=10_000.0, free_share=0.15, pending=150), 26, ALL),
}


# --- compact JSON ---------------------------------------------------------------------

_JOB_DEFAULTS = JobView(id=0, submitted_at=0.0, gpus=0)
_JOB_FIELDS = (
    "min_gpus", "max_gpus", "cpus", "memory_gb", "gpu_type", "priority", "deadline",
    "estimated_duration", "model", "preemptible", "constraints", "queued_at", "started_at",
    "service_seconds", "attained_gpu_seconds", "preemptions", "progress",
)  # fmt: skip


def job_json(job: JobView) -> dict[str, Any]:
    out: dict[str, Any] = {"id": job.id, "submitted_at": job.submitted_at, "gpus": job.gpus}
    for name in _JOB_FIELDS:
        value = getattr(job, name)
        if value != getattr(_JOB_DEFAULTS, name):
            out[name] = list(value) if isinstance(value, tuple) else value
    if job.placement is not None:
        out["placement"] = job.placement.as_dict()
    return out


def job_from(data: Mapping[str, Any]) -> JobView:
    fields = dict(data)
    if "constraints" in fields:
        fields["constraints"] = tuple(fields["constraints"])
    if "placement" in fields:
        fields["placement"] = Placement.of(fields["placement"])
    return JobView(**fields)


def view_json(view: ClusterView) -> dict[str, Any]:
    nodes = []
    for n in view.nodes:
        node: dict[str, Any] = {"name": n.name, "gpus": n.num_gpus, "type": n.gpu_type}
        if n.cpus or n.memory_gb:
            node.update(cpus=n.cpus, memory_gb=n.memory_gb)
        if not n.healthy:
            node["healthy"] = False
        if n.capabilities.labels:
            node["labels"] = sorted(n.capabilities.labels)
        nodes.append(node)
    return {
        "now": view.now,
        "nodes": nodes,
        "pending": [job_json(j) for j in view.pending],
        "running": [job_json(j) for j in view.running],
    }


def view_from(data: Mapping[str, Any]) -> ClusterView:
    """The snapshot back: GPUs' holders, free CPUs and memory rebuilt from the running jobs."""
    nodes = []
    for n in data["nodes"]:
        node = NodeView.new(
            n["name"], n["gpus"], n["type"], n.get("cpus", 0.0), n.get("memory_gb", 0.0)
        )
        if "labels" in n:
            node = replace(node, capabilities=NodeCapabilities(labels=frozenset(n["labels"])))
        nodes.append(node)
    running = tuple(job_from(j) for j in data["running"])
    ledger = GpuLedger(nodes)
    for job in running:
        assert job.placement is not None
        ledger.apply([Start(job.id, job.placement)], {job.id: job})
    views = []
    for n in data["nodes"]:
        view = ledger.node_view(n["name"])
        views.append(view if n.get("healthy", True) else replace(view, healthy=False))
    pending = tuple(job_from(j) for j in data["pending"])
    return ClusterView(data["now"], tuple(views), pending, running)


def decision_json(d: Decision) -> list[Any]:
    if isinstance(d, Preempt):
        return ["preempt", d.job_id, d.reclaimed_by]
    kind = "start" if isinstance(d, Start) else "resize"
    return [kind, d.job_id, str(d.placement)]


def decide(spec: str, view: ClusterView) -> list[list[Any]]:
    """A fresh policy's decisions on `view`, in JSON form."""
    return [decision_json(d) for d in create(spec).decide(view)]


def record(path: Path = DATA) -> None:
    cases = {}
    for name, (shape, seed, policies) in CASES.items():
        view = scale_view(shape, seed)
        assert view_from(json.loads(json.dumps(view_json(view)))) == view, name
        cases[name] = {
            "view": view_json(view),
            "decisions": {spec: decide(spec, view) for spec in policies},
        }
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(cases, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        sys.exit("usage: python tests/unit/core/pass_views.py record")
    record()
