"""Seeded snapshots of a large cluster, for timing and replaying one scheduling pass.

`scale_view(Shape(...), seed)` gives a consistent `ClusterView`: nodes of
one GPU type or several in turn, running jobs placed on random nodes (not
packed), so the free GPUs are scattered as on a cluster that has run for
a while, and waiting jobs drawn like Philly's (mostly one GPU, a few
whole nodes and gangs). A `GpuLedger` checks every placement. The same
shape and seed always give the same snapshot.

Two users: `bench/pass_scale.py` times one pass per policy on 1,000
nodes x 8 GPUs with 10,000 waiting jobs, and
`tests/unit/core/test_pass_replay.py` replays snapshots of this
generator recorded with their decisions (issue 36, item 2). Changing
what it draws changes those recorded snapshots' meaning: their JSON
holds the snapshots themselves, so the replay does not move, but
`tests/unit/core/pass_views.py record` would no longer rewrite the same
file.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from schedulearn.core import ClusterView, GpuLedger, JobView, NodeView, Placement, Start
from schedulearn.core.capabilities import NodeCapabilities

__all__ = ["MODELS", "NOW", "SIZES", "TYPES", "Shape", "scale_view"]

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
