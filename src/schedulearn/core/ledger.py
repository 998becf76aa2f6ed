"""The authoritative record of who holds which GPU, and the rules for changing it.

Both hosts keep their allocations in a `GpuLedger`: the simulator as its
cluster state, the live scheduler to check a pass before it writes it to
the database. Every change goes through `apply`, which enforces the
invariants the whole system relies on:

- no GPU is held by two jobs;
- a job gets all the GPUs of its placement or none of them;
- a job is placed only on healthy nodes that can run it
  (`core.capabilities.can_run`: executor and container runtime, labels,
  GPU type), within the node's free CPUs and memory, at a size its
  request allows;
- a pass is atomic: if one decision is invalid, nothing changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from schedulearn.core.capabilities import can_run, why_not
from schedulearn.core.decisions import Decision, Preempt, Resize, Start
from schedulearn.core.views import GpuView, JobView, NodeView, Placement, rebuild


class InvalidDecision(ValueError):
    """A policy asked for something the cluster cannot do; nothing was changed."""


@dataclass(slots=True)
class _NodeState:
    view: NodeView
    owners: dict[int, int | None]
    free_cpus: float
    free_memory_gb: float
    # The current GpuView of each GPU (with its holder), in the node's GPU
    # order. Kept up to date per GPU as it changes hands, so a snapshot of
    # the node copies views instead of building one per GPU each time.
    gpus: dict[int, GpuView]


class GpuLedger:
    """Mutable allocation state of a cluster, changed only through `apply`."""

    def __init__(self, nodes: Iterable[NodeView]) -> None:
        self._nodes: dict[str, _NodeState] = {}
        self._held: dict[int, tuple[JobView, Placement]] = {}
        self._dirty: set[str] = set()
        for node in nodes:
            self.add_node(node)

    # --- nodes -------------------------------------------------------------

    def add_node(self, node: NodeView) -> None:
        """Add a node (its GPUs' `job_id`s are ignored: the ledger owns those)."""
        if node.name in self._nodes:
            raise ValueError(f"node {node.name!r} is already in the ledger")
        self._nodes[node.name] = _NodeState(
            view=node,
            owners={g.index: None for g in node.gpus},
            free_cpus=node.cpus,
            free_memory_gb=node.memory_gb,
            gpus={g.index: _holding(g, None) for g in node.gpus},
        )
        self._dirty.add(node.name)

    def set_health(self, name: str, healthy: bool) -> None:
        state = self._nodes[name]
        state.view = replace(state.view, healthy=healthy)
        self._dirty.add(name)

    def node_names(self) -> list[str]:
        return list(self._nodes)

    def node_view(self, name: str) -> NodeView:
        """A fresh snapshot of one node, with holders and free resources."""
        state = self._nodes[name]
        # Every other field (capabilities, and any declared later) by name.
        return rebuild(
            state.view,
            gpus=tuple(state.gpus.values()),
            free_cpus=state.free_cpus,
            free_memory_gb=state.free_memory_gb,
        )

    def take_dirty(self) -> set[str]:
        """Names of nodes changed since the last call (for incremental snapshots)."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    # --- jobs --------------------------------------------------------------

    def placement_of(self, job_id: int) -> Placement | None:
        held = self._held.get(job_id)
        return None if held is None else held[1]

    def holder(self, node: str, gpu: int) -> int | None:
        return self._nodes[node].owners[gpu]

    def jobs_on(self, node: str) -> list[int]:
        return sorted({j for j in self._nodes[node].owners.values() if j is not None})

    def free_gpus(self) -> int:
        return sum(
            sum(1 for j in s.owners.values() if j is None)
            for s in self._nodes.values()
            if s.view.healthy
        )

    def apply(self, decisions: Sequence[Decision], jobs: Mapping[int, JobView]) -> None:
        """Apply one pass atomically: releases first, then acquisitions.

        `jobs` maps every job id the decisions name to its view. Raises
        `InvalidDecision` (and changes nothing) if any decision breaks a rule.
        """
        undo: list[tuple[str, int, JobView, Placement]] = []
        try:
            seen: set[int] = set()
            for d in decisions:
                if d.job_id in seen:
                    raise InvalidDecision(f"job {d.job_id} appears twice in one pass")
                seen.add(d.job_id)
                if d.job_id not in jobs:
                    raise InvalidDecision(f"job {d.job_id} is not in the snapshot")
            for d in decisions:
                if isinstance(d, Preempt | Resize):
                    job = jobs[d.job_id]
                    placement = self._require_held(d.job_id)
                    # A reclaim requeues a non-preemptible borrower (Preempt.reclaimed_by).
                    requeue = isinstance(d, Preempt) and d.reclaimed_by is not None
                    if not job.preemptible and not requeue:
                        verb = "preempted" if isinstance(d, Preempt) else "resized or moved"
                        raise InvalidDecision(
                            f"job {d.job_id} is not preemptible and cannot be {verb}"
                        )
                    self._release(d.job_id)
                    undo.append(("released", d.job_id, job, placement))
            for d in decisions:
                if isinstance(d, Start | Resize):
                    job = jobs[d.job_id]
                    if isinstance(d, Start) and d.job_id in self._held:
                        raise InvalidDecision(f"job {d.job_id} is already running")
                    self._acquire(job, d.placement)
                    undo.append(("acquired", d.job_id, job, d.placement))
        except InvalidDecision:
            for kind, job_id, job, placement in reversed(undo):
                if kind == "acquired":
                    self._release(job_id)
                else:
                    self._acquire(job, placement, check=False)
            raise

    def release(self, job_id: int) -> Placement:
        """A job ended (or its node died): free what it held."""
        self._require_held(job_id)
        return self._release(job_id)

    # --- internals ---------------------------------------------------------

    def _require_held(self, job_id: int) -> Placement:
        held = self._held.get(job_id)
        if held is None:
            raise InvalidDecision(f"job {job_id} is not running")
        return held[1]

    def _acquire(self, job: JobView, placement: Placement, check: bool = True) -> None:
        if check:
            self._check(job, placement)
        for name, gpus in placement:
            state = self._nodes[name]
            for g in gpus:
                state.owners[g] = job.id
                state.gpus[g] = _holding(state.gpus[g], job.id)
            cpus, mem = job.demand_on(placement, len(gpus), state.view.cpus)
            state.free_cpus -= cpus
            state.free_memory_gb -= mem
            self._dirty.add(name)
        self._held[job.id] = (job, placement)

    def _release(self, job_id: int) -> Placement:
        job, placement = self._held.pop(job_id)
        for name, gpus in placement:
            state = self._nodes[name]
            for g in gpus:
                state.owners[g] = None
                state.gpus[g] = _holding(state.gpus[g], None)
            cpus, mem = job.demand_on(placement, len(gpus), state.view.cpus)
            state.free_cpus += cpus
            state.free_memory_gb += mem
            self._dirty.add(name)
        return placement

    def _check(self, job: JobView, placement: Placement) -> None:
        size = placement.num_gpus
        if not job.least_gpus <= size <= job.most_gpus:
            want = f"{job.least_gpus}..{job.most_gpus}" if job.is_elastic else str(job.gpus)
            raise InvalidDecision(f"job {job.id} asks for {want} GPUs, not {size}")
        if placement.num_nodes == 0:
            raise InvalidDecision(f"job {job.id} was given an empty placement")
        for name, gpus in placement:
            state = self._nodes.get(name)
            if state is None:
                raise InvalidDecision(f"job {job.id} placed on unknown node {name!r}")
            if not state.view.healthy:
                raise InvalidDecision(f"job {job.id} placed on node {name!r}, which is down")
            if job.gpu_type and gpus and state.view.gpu_type != job.gpu_type:
                raise InvalidDecision(
                    f"job {job.id} needs {job.gpu_type} GPUs; node {name!r} has "
                    f"{state.view.gpu_type or 'untyped'} GPUs"
                )
            if not can_run(job, state.view):
                raise InvalidDecision(f"job {job.id} cannot run there: {why_not(job, state.view)}")
            for g in gpus:
                if g not in state.owners:
                    raise InvalidDecision(f"node {name!r} has no GPU {g}")
                owner = state.owners[g]
                if owner is not None:
                    raise InvalidDecision(
                        f"GPU {g} of node {name!r} is held by job {owner}; "
                        f"job {job.id} cannot have it too"
                    )
            cpus, mem = job.demand_on(placement, len(gpus), state.view.cpus)
            if cpus > state.free_cpus + 1e-9 or mem > state.free_memory_gb + 1e-9:
                raise InvalidDecision(
                    f"job {job.id} needs {cpus:g} CPUs and {mem:g} GB on {name!r}; "
                    f"it has {state.free_cpus:g} CPUs and {state.free_memory_gb:g} GB free"
                )


def _holding(gpu: GpuView, job_id: int | None) -> GpuView:
    """`gpu` as held by `job_id` (the same object when nothing changes)."""
    if gpu.job_id == job_id:
        return gpu
    return GpuView(gpu.index, gpu.type, gpu.uuid, gpu.memory_mb, job_id)
