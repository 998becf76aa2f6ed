"""Tetris: multi-resource packing (GPUs, CPUs, memory): among all pending jobs,
repeatedly start the (job, node) pair whose demand vector best aligns
with the node's free vector (dot product, each dimension divided by the
node's capacity), until nothing fits. Source: Grandl et al.,
"Multi-resource packing for cluster schedulers", SIGCOMM 2014.

Rule in full, one pass: every pending job (every task of an array is its
own job) is a candidate: there is no head-of-line blocking. For a job j
and a node n with capacity C and free resources F, both over the
dimensions GPU, CPU and memory, the alignment score is

    sum over dimensions d of (demand_j[d] / C_n[d]) * (F_n[d] / C_n[d])

counting only dimensions the node has (capacity above 0), and only pairs
where the job fits on the node whole (GPU type included). The best pair
starts; the node's free vector shrinks; repeat. Large demands on empty
nodes score highest, so big tasks are placed while room exists and
small tasks fill the gaps, which cuts fragmentation and makespan. Ties
go to the earlier arrival, then to the node listed first. A job that no
single node could hold even when empty (more GPUs than any node of its
type has) is placed afterwards, in arrival order, as a gang over the
fewest nodes.

Tasks may ask for no GPU (CPU and memory only). Jobs with the same
demand vector are scored once per node, which keeps a pass cheap when an
array has many identical tasks.
"""

from __future__ import annotations

from typing import ClassVar

from schedulearn.core.decisions import Decision, Start
from schedulearn.core.placement import FreePool
from schedulearn.core.registry import register
from schedulearn.core.views import ClusterView, JobView, NodeView


class _Demand:
    """Pending jobs with one demand vector, in arrival order."""

    __slots__ = ("cpus", "gpu_type", "gpus", "jobs", "mem", "next", "ranks")

    def __init__(self, job: JobView) -> None:
        self.gpus = job.gpus
        self.cpus = job.cpus
        self.mem = job.memory_gb
        self.gpu_type = job.gpu_type or ""
        self.jobs: list[JobView] = []
        self.ranks: list[int] = []
        self.next = 0

    @property
    def empty(self) -> bool:
        return self.next >= len(self.jobs)

    @property
    def head_rank(self) -> int:
        return self.ranks[self.next]


class _Node:
    """One node's capacity and free vector during the pass."""

    __slots__ = ("cap", "free", "index", "view")

    def __init__(self, index: int, view: NodeView, pool: FreePool) -> None:
        self.index = index
        self.view = view
        self.cap = (float(view.num_gpus), view.cpus, view.memory_gb)
        self.free = (0.0, 0.0, 0.0)
        self.refresh(pool)

    def refresh(self, pool: FreePool) -> None:
        self.free = (
            float(pool.num_free(self.view)),
            pool.free_cpus(self.view),
            pool.free_memory_gb(self.view),
        )

    def holds(self, d: _Demand) -> bool:
        """Could this node hold `d` whole if it were empty?"""
        cg, cc, cm = self.cap
        return (
            d.gpus <= cg
            and not (d.cpus and cc + 1e-9 < d.cpus)
            and not (d.mem and cm + 1e-9 < d.mem)
            and not (d.gpu_type and d.gpus and self.view.gpu_type != d.gpu_type)
        )

    def score(self, d: _Demand) -> float | None:
        """Alignment of `d` with this node's free vector; None if it does not fit."""
        fg, fc, fm = self.free
        if d.gpus > fg:
            return None
        if d.cpus and fc + 1e-9 < d.cpus:
            return None
        if d.mem and fm + 1e-9 < d.mem:
            return None
        if d.gpu_type and d.gpus and self.view.gpu_type != d.gpu_type:
            return None
        cg, cc, cm = self.cap
        s = 0.0
        if cg > 0:
            s += (d.gpus / cg) * (fg / cg)
        if cc > 0:
            s += (d.cpus / cc) * (fc / cc)
        if cm > 0:
            s += (d.mem / cm) * (fm / cm)
        return s


@register
class Tetris:
    name: ClassVar[str] = "tetris"
    tick_seconds: ClassVar[float | None] = None

    def decide(self, view: ClusterView) -> list[Decision]:
        if not view.pending:
            return []
        pool = FreePool(view)
        nodes = [_Node(i, n, pool) for i, n in enumerate(view.nodes) if n.healthy]
        demands: dict[tuple[int, float, float, str], _Demand] = {}
        for rank, job in enumerate(view.pending):
            key = (job.gpus, job.cpus, job.memory_gb, job.gpu_type or "")
            d = demands.get(key)
            if d is None:
                d = demands[key] = _Demand(job)
            d.jobs.append(job)
            d.ranks.append(rank)
        # A demand that no node could hold even when empty can only run as a gang.
        live: list[_Demand] = []
        gangs: list[tuple[int, JobView]] = []
        for d in demands.values():
            if any(n.holds(d) for n in nodes):
                live.append(d)
            else:
                gangs.extend(zip(d.ranks, d.jobs, strict=True))
        decisions: list[Decision] = []
        best: list[tuple[float, _Demand] | None] = [_best(n, live) for n in nodes]
        while True:
            chosen: _Node | None = None
            top: tuple[float, int, int] | None = None
            for node, b in zip(nodes, best, strict=True):
                if b is None:
                    continue
                key3 = (b[0], -b[1].head_rank, -node.index)
                if top is None or key3 > top:
                    top, chosen = key3, node
            if chosen is None:
                break
            entry = best[nodes.index(chosen)]
            assert entry is not None
            d = entry[1]
            job = d.jobs[d.next]
            d.next += 1
            placement = pool.on_node(chosen.view, job.gpus)
            pool.take(job, placement)
            decisions.append(Start(job.id, placement))
            chosen.refresh(pool)
            if d.empty:
                live = [x for x in live if not x.empty]
                best = [
                    _best(n, live) if n is chosen or (b is not None and b[1] is d) else b
                    for n, b in zip(nodes, best, strict=True)
                ]
            else:
                best[nodes.index(chosen)] = _best(chosen, live)
        for _, job in sorted(gangs, key=lambda rj: rj[0]):
            spread = pool.gang(job)
            if spread is not None:
                pool.take(job, spread)
                decisions.append(Start(job.id, spread))
        return decisions


def _best(node: _Node, demands: list[_Demand]) -> tuple[float, _Demand] | None:
    """The best-aligned demand that fits `node` (earliest head on ties)."""
    found: tuple[float, _Demand] | None = None
    for d in demands:
        if d.empty:
            continue
        s = node.score(d)
        if s is None:
            continue
        if found is None or s > found[0] or (s == found[0] and d.head_rank < found[1].head_rank):
            found = (s, d)
    return found
