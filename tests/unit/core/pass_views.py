"""Large seeded cluster snapshots, and a compact JSON form of a snapshot and its decisions.

Two users:

- `bench/pass_scale.py` times one scheduling pass per policy on
  `scale_view(...)` (1,000 nodes x 8 GPUs, 10,000 waiting jobs, a share
  of the GPUs free);
- `test_pass_replay.py` replays the snapshots recorded in
  `data/pass_decisions.json` through today's policies and asserts the
  decisions recorded with the code of main at 3bde86d, before the pass
  was made faster (issue 36): a speed-up may change no decision.

`python tests/unit/core/pass_views.py record` wrote that file, run with
main at 3bde86d's core first on the path (`PYTHONPATH=<that checkout>/src`);
the cases added later were recorded the same way. It is kept to show how
the cases were made (`CASES`), not to be rerun with a changed policy: the
recorded decisions are the old code's. (Rerun with today's code, it must
write the same file, which is what the test checks.)

The generator places running jobs on random nodes (not packed), so the
free GPUs are scattered as on a cluster that has run for a while; a
`GpuLedger` checks every placement, so the snapshot is consistent.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
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

DATA = Path(__file__).parent / "data" / "pass_decisions.json"
NOW = 100_000.0
# Sizes drawn like Philly's jobs: mostly one GPU, a few whole nodes and gangs.
SIZES = (1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 16)
MODELS = ("resnet50", "resnet18 bs=64", "transformer", "lm", "recommendation", "a3c", "mystery")
TYPES = ("v100", "p100", "k80")


@dataclass(frozen=True)
class Shape:
    """What a generated snapshot looks like."""

    nodes: int = 50
    gpus_per_node: int = 8
    pending: int = 300
    free_share: float = 0.5
    gpu_types: tuple[str, ...] = ()
    elastic_share: float = 0.0
    resources: bool = False  # jobs ask for CPUs and memory; nodes declare them
    unhealthy: int = 0
    constrained: bool = False  # some jobs name a GPU type or a label; some nodes carry it
    now: float = NOW
    # Jobs arrived within this many seconds before `now` (similarity's guard
    # serves jobs that waited 6 h first: a longer span exercises it).
    span: float = 20_000.0
    # The share of running jobs that may be preempted (0: a full cluster where
    # nothing can start, not even by preempting).
    preemptible: float = 0.7
    # The share of waiting jobs that ask for no GPU (CPU-only tasks).
    cpu_only: float = 0.0


def scale_view(shape: Shape, seed: int) -> ClusterView:
    """A consistent snapshot of `shape`, the same for the same seed."""
    rng = random.Random(seed)
    cpus, mem = (64.0, 512.0) if shape.resources else (0.0, 0.0)
    nodes: list[NodeView] = []
    for i in range(shape.nodes):
        gpu_type = shape.gpu_types[i % len(shape.gpu_types)] if shape.gpu_types else ""
        caps = (
            NodeCapabilities(labels=frozenset({"ib"})) if shape.constrained and i % 3 == 0 else None
        )
        node = NodeView.new(f"n{i:04d}", shape.gpus_per_node, gpu_type, cpus, mem)
        nodes.append(node if caps is None else replace(node, capabilities=caps))
    ledger = GpuLedger(nodes)
    free = {n.name: list(range(shape.gpus_per_node)) for n in nodes}
    total = shape.nodes * shape.gpus_per_node
    busy_goal = round(total * (1.0 - shape.free_share))
    busy = 0
    running: list[JobView] = []
    next_id = 1
    misses = 0
    while busy < busy_goal and (misses < 200 or not shape.free_share):
        # A full cluster is filled to the last GPU: one-GPU jobs once big ones miss.
        gpus = 1 if misses >= 200 else min(rng.choice(SIZES), busy_goal - busy)
        job = _job(rng, next_id, gpus, shape, running=True)
        placement = _random_placement(rng, free, gpus, nodes)
        if placement is None:
            misses += 1
            continue
        started = round(rng.uniform(job.submitted_at, shape.now - 1), 1)
        job = replace(job, placement=placement, started_at=started)
        ledger.apply([Start(job.id, placement)], {job.id: job})
        for name, held in placement:
            for g in held:
                free[name].remove(g)
        running.append(job)
        busy += gpus
        next_id += 1
    views = [ledger.node_view(n.name) for n in nodes]
    for k in rng.sample(range(len(views)), shape.unhealthy):
        views[k] = replace(views[k], healthy=False)
    pending = [
        _job(rng, next_id + k, _size(rng, shape), shape, running=False)
        for k in range(shape.pending)
    ]
    pending.sort(key=lambda j: (j.waiting_since, j.id))
    return ClusterView(shape.now, tuple(views), tuple(pending), tuple(running))


def _size(rng: random.Random, shape: Shape) -> int:
    if shape.cpu_only and rng.random() < shape.cpu_only:
        return 0
    return rng.choice(SIZES)


def _random_placement(
    rng: random.Random, free: dict[str, list[int]], gpus: int, nodes: Sequence[NodeView]
) -> Placement | None:
    size = nodes[0].num_gpus
    if gpus <= size:
        fits = [n.name for n in nodes if len(free[n.name]) >= gpus]
        if not fits:
            return None
        name = rng.choice(fits)
        return Placement.single(name, free[name][:gpus])
    # A gang: whole nodes, and the rest on one more node.
    whole = [n.name for n in nodes if len(free[n.name]) == size]
    if len(whole) * size < gpus:
        return None
    chosen = rng.sample(whole, -(-gpus // size))
    parts = {name: free[name][:size] for name in chosen}
    if gpus % size:
        parts[chosen[-1]] = free[chosen[-1]][: gpus % size]
    return Placement.of(parts)


def _job(rng: random.Random, job_id: int, gpus: int, shape: Shape, running: bool) -> JobView:
    now = shape.now
    submitted = rng.uniform(now - shape.span, now - 1)
    share = shape.preemptible if running else 0.7
    fields: dict[str, Any] = {"preemptible": rng.random() < share}
    if rng.random() < 0.9:
        fields["estimated_duration"] = round(rng.expovariate(1 / 20_000.0) + 60.0, 1)
    if shape.gpu_types or rng.random() < 0.5:
        fields["model"] = rng.choice(MODELS)
    if shape.resources:
        # Running jobs ask little enough that any mix of them fits a node (at
        # most 32 CPUs and 256 GB on 8 GPUs); waiting ones up to twice that.
        per_gpu = (0, 2, 4) if running else (0, 2, 4, 8)
        fields["cpus"] = float(rng.choice(per_gpu)) * max(1, min(gpus, 8))
        fields["memory_gb"] = (
            float(rng.choice((0, 16, 64))) * max(1, min(gpus, 8)) / (2 if running else 1)
        )
    if shape.constrained and not running and rng.random() < 0.1:
        if shape.gpu_types and rng.random() < 0.5:
            fields["gpu_type"] = rng.choice(shape.gpu_types)
        else:
            fields["constraints"] = ("ib",)
    if shape.elastic_share and gpus > 1 and rng.random() < shape.elastic_share:
        fields["min_gpus"] = max(1, gpus // 2)
        fields["max_gpus"] = gpus * 2
    if rng.random() < 0.2:
        # Ran before: attained service, and (if waiting) requeued since.
        service = rng.uniform(10.0, 30_000.0)
        fields["service_seconds"] = round(service, 1)
        fields["attained_gpu_seconds"] = round(service * gpus, 1)
        fields["preemptions"] = 1
        if not running:
            fields["queued_at"] = round(rng.uniform(submitted, now), 1)
    if running and rng.random() < 0.3 and "estimated_duration" in fields:
        fields["progress"] = round(rng.random(), 3)
    return JobView(id=job_id, submitted_at=round(submitted, 1), gpus=gpus, **fields)


# --- the recorded cases ---------------------------------------------------------------

# name -> (shape, seed, policies). Every policy on the default shapes; similarity's
# cases add GPU types, goodput's elastic ranges.
ALL: tuple[str, ...] = (
    "fifo", "fifo:backfill=true", "tiresias", "srtf", "goodput", "similarity", "defrag",
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
