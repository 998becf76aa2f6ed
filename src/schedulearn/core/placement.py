"""Placement helpers shared by every policy: which node, which GPUs.

`FreePool` is a policy's scratch copy of what is free during one
`decide` call. It starts from the snapshot and records what the policy
has already handed out or taken back in this pass, so a policy that
starts several jobs never gives a GPU twice. Only the nodes a pass
touches are copied, and nodes are found by their free GPU count
(`core.free_counts`) rather than by reading every node, which keeps a
pass cheap on clusters of thousands of GPUs.

The rules, in one place:
- a job gets all of its GPUs at once or none (gang scheduling);
- a job goes on one node whenever one node can hold it, because
  cross-node traffic is the expensive part; otherwise it spreads over
  the fewest nodes, taking the emptiest first;
- a job goes only on nodes that can run it (`core.capabilities.can_run`:
  a container runtime for an image, the labels it asks for, its GPU
  type); every choosing method here goes through `fits` or `gang`, which
  apply that rule, so a policy that places through the pool needs no
  code of its own for it;
- GPUs within a node are taken lowest index first.

Speed: the simulator calls a policy for every event of a trace with tens
of thousands of jobs on hundreds of nodes, so the scans here run at C
speed where they can: the free-GPU count of every node is one list built
on first use and kept current by `take`/`release`, and the best fit
searches it with `list.index` instead of a Python loop over nodes. A
node's position is found through a small module-level cache of name ->
position, checked on every use and rebuilt when the node list changes;
it is a cache only, so results never depend on it.
"""

from __future__ import annotations

from collections.abc import Iterator

from schedulearn.core.capabilities import asks_gpus_only, can_run
from schedulearn.core.free_counts import FreeCounts, Scope
from schedulearn.core.views import ClusterView, JobView, NodeView, Placement

# name -> position in the node tuple last seen; verified on every lookup.
_positions: dict[str, int] = {}


def _position(nodes: tuple[NodeView, ...], name: str) -> int:
    """Where node `name` sits in `nodes` (KeyError if it is not there)."""
    global _positions
    i = _positions.get(name)
    if i is not None and i < len(nodes) and nodes[i].name == name:
        return i
    _positions = {node.name: k for k, node in enumerate(nodes)}
    return _positions[name]


class FreePool:
    """What is free on each node, as seen by one policy pass."""

    __slots__ = ("_cpus", "_free", "_given", "_index", "_mem", "_nodes")

    def __init__(self, view: ClusterView | tuple[NodeView, ...]) -> None:
        self._nodes: tuple[NodeView, ...] = view.nodes if isinstance(view, ClusterView) else view
        # Copy-on-write overrides for the nodes this pass has touched (CPUs and
        # memory only for those whose CPUs or memory it changed).
        self._free: dict[str, list[int]] = {}
        self._cpus: dict[str, float] = {}
        self._mem: dict[str, float] = {}
        # Free GPUs per node position and their indexes (core.free_counts), built
        # on first use, kept current by take/release.
        self._index: FreeCounts | None = None
        # The counts the host handed over with the snapshot, if it keeps them.
        self._given = view.free_counts if isinstance(view, ClusterView) else None

    # --- reading -----------------------------------------------------------

    @property
    def nodes(self) -> tuple[NodeView, ...]:
        return self._nodes

    def node(self, name: str) -> NodeView:
        """The node called `name` (KeyError if the pool has none)."""
        return self._nodes[_position(self._nodes, name)]

    def free_gpus(self, node: NodeView) -> tuple[int, ...] | list[int]:
        free = self._free.get(node.name)
        return node.free_gpu_indices if free is None else free

    def num_free(self, node: NodeView) -> int:
        free = self._free.get(node.name)
        return node.num_free_gpus if free is None else len(free)

    def free_cpus(self, node: NodeView) -> float:
        return self._cpus.get(node.name, node.free_cpus)

    def free_memory_gb(self, node: NodeView) -> float:
        return self._mem.get(node.name, node.free_memory_gb)

    def total_free(self) -> int:
        return sum(self._indexed().counts)

    def _indexed(self) -> FreeCounts:
        index = self._index
        if index is None:
            given = self._given
            # Unhealthy nodes have no free_gpu_indices, so they count 0.
            counts = (
                list(given)
                if given is not None
                else [len(node.free_gpu_indices) for node in self._nodes]
            )
            for name, free in self._free.items():
                counts[_position(self._nodes, name)] = len(free)
            index = self._index = FreeCounts(self._nodes, counts)
        return index

    def _scope(self, gpu_type: str | None, gpus: int) -> Scope:
        """The free counts to search for `gpus` GPUs of `gpu_type` (the type a job
        names, or is placed as if it named): a job that asks for GPUs of a type
        fits only on that type's nodes."""
        return self._indexed().scope(gpu_type if gpus > 0 else None)

    def fits(self, node: NodeView, job: JobView, gpus: int) -> bool:
        """Can `node` alone hold `gpus` GPUs of `job`, with its CPUs and memory?"""
        if not node.healthy or self.num_free(node) < gpus:
            return False
        if job.gpu_type and gpus and node.gpu_type != job.gpu_type:
            return False
        if not can_run(job, node):
            return False
        return self._fits_rest(node, job.cpus_on(node.cpus), job.memory_gb)

    def runnable(self, job: JobView, node: NodeView) -> bool:
        """May `job` go on `node` at all (capabilities, GPU type), whatever is free?
        For policies that score nodes themselves instead of calling `fits`."""
        return can_run(job, node)

    def _fits_rest(self, node: NodeView, cpus: float, memory_gb: float) -> bool:
        if cpus and self.free_cpus(node) + 1e-9 < cpus:
            return False
        return not (memory_gb and self.free_memory_gb(node) + 1e-9 < memory_gb)

    def candidates(self, job: JobView, gpus: int) -> Iterator[NodeView]:
        """Nodes, in cluster order, that can hold the whole job alone.

        The pool must not change while the caller iterates."""
        nodes = self._nodes
        for i in self._indexed().holding(gpus, 0, len(nodes)):
            if self.fits(nodes[i], job, gpus):
                yield nodes[i]

    # --- choosing ----------------------------------------------------------

    def on_node(self, node: NodeView, gpus: int) -> Placement:
        """The lowest-indexed `gpus` free GPUs of `node`."""
        return Placement.single(node.name, self.free_gpus(node)[:gpus])

    def first_fit(
        self, job: JobView, gpus: int | None = None, after: str | None = None
    ) -> Placement | None:
        """The first node (in cluster order, or the first after node `after`,
        wrapping around) that holds the whole job."""
        n = job.gpus if gpus is None else gpus
        nodes = self._nodes
        i = 0
        if after is not None:
            try:
                i = _position(nodes, after) + 1
            except KeyError:
                i = 0
        for start, stop in ((i, len(nodes)), (0, i)):
            for k in self._indexed().holding(n, start, stop):
                if self.fits(nodes[k], job, n):
                    return self.on_node(nodes[k], n)
        return None

    def best_fit(
        self,
        job: JobView,
        gpus: int | None = None,
        avoid: str | None = None,
        *,
        gpu_type: str | None = None,
    ) -> Placement | None:
        """The node that holds the whole job with the fewest GPUs left over
        (the first in cluster order among equals), other than node `avoid`;
        only on `gpu_type` nodes when given (see `pack`)."""
        n = job.gpus if gpus is None else gpus
        index = self._index or self._indexed()
        kind = gpu_type or job.gpu_type
        # `_scope`, inline: a large pass places thousands of jobs. `hint`: per
        # free count, where its first node may be (`FreeCounts`), moved up here.
        if n > 0 and kind:
            counts, where, tally, hint = index.scope(kind)
        else:
            counts, where, tally, hint = index.counts, None, index.tally, index.hint
        nodes = self._nodes
        # A job that asks for GPUs only (no CPUs, memory, image, label or GPU
        # type) fits on any healthy node with enough free GPUs that can run it
        # (`can_run`: host processes, the owner's account), so the count decides
        # without the rest of the check.
        gpus_only = n > 0 and asks_gpus_only(job)
        # Fewest left over first: try free counts n, n+1, ... in turn, and
        # within one count the nodes in cluster order (list.index scans in C).
        for k in index.present(n, tally):
            i = hint.get(k, 0) - 1
            seen = False
            while True:
                try:
                    i = counts.index(k, i + 1)
                except ValueError:
                    break
                if not seen:
                    hint[k], seen = i, True
                node = nodes[i if where is None else where[i]]
                if node.name == avoid:
                    continue
                if (gpus_only and node.healthy and can_run(job, node)) or self.fits(node, job, n):
                    # `on_node`, inline.
                    free = self._free.get(node.name)
                    held = (node.free_gpu_indices if free is None else free)[:n]
                    return Placement.single(node.name, held)
        return None

    def gang(
        self, job: JobView, gpus: int | None = None, *, gpu_type: str | None = None
    ) -> Placement | None:
        """Spread the job over the fewest nodes, emptiest first (only `gpu_type`
        nodes when given, see `pack`); None if the cluster cannot hold all of it now.

        Each step finishes on the node with the fewest free GPUs that holds
        the remainder, or, when none does, takes the node with the most free
        GPUs whole; among nodes with equal free GPUs the first in cluster
        order. The nodes are found by free count (`list.index`, a scan in
        C), not by sorting every node on every call.
        """
        n = job.gpus if gpus is None else gpus
        gpu_type = gpu_type or job.gpu_type
        counts, where, tally, _ = self._scope(gpu_type, n)
        nodes = self._nodes
        present = self._indexed().present(1, tally)
        # Per free count, where the search for the next usable node resumes:
        # a node passed over (unusable, or already chosen) stays so.
        resume: dict[int, int] = {}

        def first(k: int) -> int | None:
            i = resume.get(k, 0)
            while True:
                try:
                    i = counts.index(k, i)
                except ValueError:
                    resume[k] = len(counts)
                    return None
                node = nodes[i if where is None else where[i]]
                if (
                    node.healthy
                    and not (gpu_type and node.gpu_type != gpu_type)
                    and self.runnable(job, node)
                ):
                    resume[k] = i + 1  # it is chosen now
                    return i
                i += 1

        parts: dict[str, list[int]] = {}
        left = n
        while left > 0:
            pick = None
            for k in present:  # the tightest node that holds the remainder
                if k >= left:
                    pick = first(k)
                    if pick is not None:
                        break
            if pick is None:  # else the emptiest node, whole
                for k in reversed(present):
                    if k < left:
                        pick = first(k)
                        if pick is not None:
                            break
            if pick is None:
                return None  # the usable nodes hold fewer than n free GPUs
            take = min(left, counts[pick])
            chosen = nodes[pick if where is None else where[pick]]
            parts[chosen.name] = list(self.free_gpus(chosen)[:take])
            left -= take
        placement = Placement.of(parts)
        if not (job.cpus or job.memory_gb) and job.most_gpus:
            return placement  # it reserves no CPUs or memory (`JobView.cpus_on`)
        for name, held in placement:
            node = nodes[_position(nodes, name)]
            cpus, mem = job.demand_on(placement, len(held), node.cpus)
            if not self._fits_rest(node, cpus, mem):
                return None
        return placement

    def pack(
        self, job: JobView, gpus: int | None = None, *, gpu_type: str | None = None
    ) -> Placement | None:
        """One node when one node can hold the job (best fit), else a gang.

        `gpu_type`: only on nodes of that GPU type, as if the job named it (a
        policy that picks the type itself, `similarity`, without a copy of the
        job); a job that names a type runs on no other (`can_run`)."""
        n = job.gpus if gpus is None else gpus
        return self.best_fit(job, n, gpu_type=gpu_type) or (
            self.gang(job, n, gpu_type=gpu_type) if n > 1 else None
        )

    # --- recording ---------------------------------------------------------

    def _touch(self, name: str) -> tuple[int, NodeView, list[int]]:
        """Node `name`'s position, view and free GPUs, copied into the pass on first touch."""
        i = _position(self._nodes, name)
        node = self._nodes[i]
        free = self._free.get(name)
        if free is None:
            # Its CPUs and memory are copied when they change (`_cpus`, `_mem`).
            free = self._free[name] = list(node.free_gpu_indices)
        return i, node, free

    def take(self, job: JobView, placement: Placement) -> None:
        """Mark `placement`'s GPUs (and the job's CPU and memory) as handed out."""
        # It reserves no CPUs or memory (`JobView.cpus_on`): the GPUs only.
        gpus_only = not (job.cpus or job.memory_gb) and job.most_gpus
        index, nodes, copied = self._index, self._nodes, self._free
        for name, gpus in placement.parts:
            # `_touch`, inline: a large pass takes thousands of placements.
            i = _position(nodes, name)
            node = nodes[i]
            free = copied.get(name)
            if free is None:
                free = copied[name] = list(node.free_gpu_indices)
            k = len(gpus)
            if tuple(free[:k]) == gpus:
                del free[:k]  # the lowest free GPUs, as `on_node` hands them out
            else:
                for g in gpus:
                    free.remove(g)
            if index is not None:
                index.set(i, len(free))
            if gpus_only:
                continue
            cpus, mem = job.demand_on(placement, k, node.cpus)
            if cpus:
                self._cpus[name] = self._cpus.get(name, node.free_cpus) - cpus
            if mem:
                self._mem[name] = self._mem.get(name, node.free_memory_gb) - mem

    def release(self, job: JobView, placement: Placement | None = None) -> None:
        """Give back what a running job holds (for a preemption or resize in this pass)."""
        placement = placement or job.placement
        if placement is None:
            return
        for name, gpus in placement:
            i, node, free = self._touch(name)
            free.extend(gpus)
            free.sort()
            if self._index is not None:
                self._index.set(i, len(free))
            if not (job.cpus or job.memory_gb) and job.most_gpus:
                continue  # it reserves no CPUs or memory (`JobView.cpus_on`)
            cpus, mem = job.demand_on(placement, len(gpus), node.cpus)
            if cpus:
                self._cpus[name] = self._cpus.get(name, node.free_cpus) + cpus
            if mem:
                self._mem[name] = self._mem.get(name, node.free_memory_gb) + mem


def stuck(view: ClusterView, free: int) -> bool:
    """With `free` GPUs free, can this pass start nothing, even by preempting?

    True when no GPU is free, every waiting job asks for at least one (a
    job of no GPUs may still start on a node's CPUs) and no running job
    may be preempted. A full cluster is the common case on a busy pass;
    policies return at once instead of ranking thousands of waiting jobs
    to find that none fits.
    """
    # The running jobs first: they are few beside a backlog, and one that may
    # be preempted settles it without a scan of every waiting job.
    return (
        free == 0
        and not any(job.preemptible and job.placement is not None for job in view.running)
        and all(job.gpus > 0 for job in view.pending)
    )


def largest_node_gpus(view: ClusterView) -> int:
    """GPUs on the biggest healthy node: a bigger job must run as a gang."""
    return max((n.num_gpus for n in view.nodes if n.healthy), default=0)
