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
where the job fits on the node whole (GPU type included) and the node
can run it (`FreePool.runnable`: container runtime, labels). The best pair
starts; the node's free vector shrinks; repeat. Large demands on empty
nodes score highest, so big tasks are placed while room exists and
small tasks fill the gaps, which cuts fragmentation and makespan. Ties
go to the earlier arrival, then to the node listed first. A job that no
single node could hold even when empty (more GPUs than any node of its
type has) is placed afterwards, in arrival order, as a gang over the
fewest nodes.

Tasks may ask for no GPU (CPU and memory only). Jobs with the same
demand vector are scored together, once per node, which keeps a pass
cheap when an array has many identical tasks; after a start only the
demands whose best node was that node are scored again (a node's scores
only fall as it fills, so every other best pair stays the best).
"""

from __future__ import annotations

from typing import ClassVar

from schedulearn.core.decisions import Decision, Start
from schedulearn.core.placement import FreePool
from schedulearn.core.policy import QueueOrder, arrival_order
from schedulearn.core.registry import register
from schedulearn.core.views import ZERO_GPU_CPU_SLOT, ClusterView, JobView

_EPS = 1e-9


class _Demand:
    """Pending jobs with one demand vector, in arrival order, and its best node."""

    __slots__ = (
        "allowed",
        "best",
        "cpus",
        "gpu_type",
        "gpus",
        "jobs",
        "mem",
        "next",
        "ranks",
        "score",
    )

    def __init__(self, job: JobView) -> None:
        self.gpus = job.gpus
        self.cpus = job.cpus
        self.mem = job.memory_gb
        self.gpu_type = job.gpu_type or ""
        self.jobs: list[JobView] = []
        self.ranks: list[int] = []
        self.next = 0
        self.best = -1  # position of the best-aligned node that fits, -1 if none
        self.score = -1.0
        # Per node position: may the demand's jobs run there at all (the shared
        # rule, `FreePool.runnable`)? None when every node may.
        self.allowed: list[bool] | None = None


class _Nodes:
    """The healthy nodes' capacity weights and free vectors, as parallel lists.

    Plain lists and a loop without calls keep scoring cheap on clusters
    of hundreds of nodes: it runs for every demand on every pass.
    """

    __slots__ = ("cpu", "fc", "fg", "fm", "mem", "slot", "types", "views", "wc", "wg", "wm")

    def __init__(self, view: ClusterView, cpu: bool, mem: bool, typed: bool) -> None:
        """Build only the dimensions some pending demand uses (`cpu`, `mem`, GPU
        type `typed`); the others are zeros, which score and constrain nothing."""
        views = [n for n in view.nodes if n.healthy]
        zeros = [0.0] * len(views)
        self.cpu, self.mem = cpu, mem
        self.views = views
        self.types = [n.gpu_type for n in views] if typed else [""] * len(views)
        # Each dimension is divided by the node's capacity twice (demand and
        # free), hence 1 / capacity squared; a dimension the node lacks counts 0.
        self.wg = [1.0 / (k * k) if (k := len(n.gpus)) else 0.0 for n in views]
        self.fg = [len(n.free_gpu_indices) for n in views]
        # The CPU slot a job without GPUs or CPUs of its own takes (`JobView.cpus_on`).
        self.slot = [ZERO_GPU_CPU_SLOT if n.cpus > 0 else 0.0 for n in views]
        if cpu:
            self.wc = [1.0 / n.cpus**2 if n.cpus > 0 else 0.0 for n in views]
            self.fc = [n.free_cpus for n in views]
        else:
            self.wc, self.fc = zeros, zeros
        if mem:
            self.wm = [1.0 / n.memory_gb**2 if n.memory_gb > 0 else 0.0 for n in views]
            self.fm = [n.free_memory_gb for n in views]
        else:
            self.wm, self.fm = zeros, zeros

    def refresh(self, i: int, pool: FreePool) -> None:
        node = self.views[i]
        self.fg[i] = pool.num_free(node)
        if self.cpu:
            self.fc[i] = pool.free_cpus(node)
        if self.mem:
            self.fm[i] = pool.free_memory_gb(node)

    def score_best(self, d: _Demand) -> None:
        """Set `d.best` and `d.score`: the fitting node with the highest alignment
        (the first listed among equals)."""
        g, c, m, t = d.gpus, d.cpus, d.mem, d.gpu_type
        fg, fc, fm, wg, wc, wm = self.fg, self.fc, self.fm, self.wg, self.wc, self.wm
        allowed = d.allowed
        if not (c or m or t) and g and allowed is None:
            # GPUs only (the common case in GPU traces): one C-speed pass.
            scores = [f * w if f >= g else -1.0 for f, w in zip(fg, wg, strict=True)]
            top = max(scores, default=-1.0)
            if top < 0:
                d.best, d.score = -1, -1.0
            else:
                d.best, d.score = scores.index(top), g * top
            return
        types = self.types
        best, best_s = -1, -1.0
        for i in range(len(fg)):
            free_g = fg[i]
            if g > free_g:
                continue
            free_c = fc[i]
            need_c = c or (0.0 if g else self.slot[i])
            if need_c and free_c + _EPS < need_c:
                continue
            free_m = fm[i]
            if m and free_m + _EPS < m:
                continue
            if t and g and types[i] != t:
                continue
            if allowed is not None and not allowed[i]:
                continue
            s = g * free_g * wg[i] + c * free_c * wc[i] + m * free_m * wm[i]
            if s > best_s:
                best, best_s = i, s
        d.best, d.score = best, best_s

    def could_hold(self, d: _Demand) -> bool:
        """Could some node hold `d` whole if it were empty?"""
        return any(
            d.gpus <= n.num_gpus
            and not (d.cpus and n.cpus + _EPS < d.cpus)
            and not (d.mem and n.memory_gb + _EPS < d.mem)
            and not (d.gpu_type and d.gpus and n.gpu_type != d.gpu_type)
            and (d.allowed is None or d.allowed[i])
            for i, n in enumerate(self.views)
        )


@register
class Tetris:
    name: ClassVar[str] = "tetris"
    tick_seconds: ClassVar[float | None] = None

    def order(self, view: ClusterView) -> QueueOrder:
        # Honest: which job starts next depends on the free resources, not on a rank.
        return arrival_order(
            view,
            "no fixed order: each pass starts the job whose demand best fits a node's free "
            "resources; shown in arrival order, which breaks ties",
            exact=False,
        )

    def decide(self, view: ClusterView) -> list[Decision]:
        if not view.pending:
            return []
        demands: dict[tuple[object, ...], _Demand] = {}
        for rank, job in enumerate(view.pending):
            key: tuple[object, ...] = (
                job.gpus,
                job.cpus,
                job.memory_gb,
                job.gpu_type or "",
                job.image is not None,
                *job.constraints,
            )
            d = demands.get(key)
            if d is None:
                d = demands[key] = _Demand(job)
            d.jobs.append(job)
            d.ranks.append(rank)
        pool = FreePool(view)
        nodes = _Nodes(
            view,
            # A job without GPUs takes a CPU slot even when it names no CPUs.
            cpu=any(d.cpus or not d.gpus for d in demands.values()),
            mem=any(d.mem for d in demands.values()),
            typed=any(d.gpu_type for d in demands.values()),
        )
        live = list(demands.values())
        for d in live:
            job = d.jobs[0]  # one demand shares its image need and constraints
            allowed = [pool.runnable(job, n) for n in nodes.views]
            d.allowed = None if all(allowed) else allowed
            nodes.score_best(d)
        decisions: list[Decision] = []
        while True:
            chosen: _Demand | None = None
            top = (-1.0, 0, 0)
            for d in live:
                if d.best < 0:
                    continue
                order = (d.score, -d.ranks[d.next], -d.best)
                if chosen is None or order > top:
                    chosen, top = d, order
            if chosen is None:
                break
            i = chosen.best
            job = chosen.jobs[chosen.next]
            chosen.next += 1
            placement = pool.on_node(nodes.views[i], job.gpus)
            pool.take(job, placement)
            decisions.append(Start(job.id, placement))
            nodes.refresh(i, pool)
            if chosen.next == len(chosen.jobs):
                live.remove(chosen)
            for d in live:
                if d.best == i:
                    nodes.score_best(d)
        # What is left and fits no node even when empty can only run as a gang
        # (which takes at least two GPUs: CPU-only tasks are never spread).
        gangs = sorted(
            (rank, job)
            for d in live
            if d.gpus > 1 and not nodes.could_hold(d)
            for rank, job in zip(d.ranks[d.next :], d.jobs[d.next :], strict=True)
        )
        for _, job in gangs:
            spread = pool.gang(job)
            if spread is not None:
                pool.take(job, spread)
                decisions.append(Start(job.id, spread))
        return decisions
