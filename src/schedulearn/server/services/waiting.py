"""Why a job waits, and whether it could ever run: pure functions over core views.

Owns the messages users read in `schedulearn show`, on the Queue page and
in a refused submission; who is ahead comes from the policy's own order
(`services.queue`). Both judge a job against `NodeView`s, the same snapshot the
scheduler hands the policy, so an explanation never disagrees with the
rules the ledger enforces (one node when it fits, else a gang; the
capabilities rule `core.capabilities.can_run`: container runtime, labels,
GPU type; CPUs and memory per node).
"""

from __future__ import annotations

from collections.abc import Sequence

from schedulearn.core import JobView, NodeView
from schedulearn.core.capabilities import can_run, unrunnable


def _plural(n: int | float, word: str) -> str:
    return f"{n:g} {word}" if n == 1 else f"{n:g} {word}s"


def _of_type(nodes: Sequence[NodeView], gpu_type: str | None) -> list[NodeView]:
    return [n for n in nodes if not gpu_type or n.gpu_type == gpu_type]


def _able(nodes: Sequence[NodeView], job: JobView) -> list[NodeView]:
    """The nodes that can run `job` at all (the one feasibility rule)."""
    return [n for n in nodes if can_run(job, n)]


def never_servable(job: JobView, nodes: Sequence[NodeView]) -> str | None:
    """Why no node of this cluster could ever run `job`, or None if some could.

    Judged against every known node, up or down (a down node may come
    back). With no node registered yet nothing can be judged, so nothing
    is refused.
    """
    if not nodes:
        return None
    why = unrunnable(job, nodes)
    if why is not None:
        return why
    if job.gpu_type and not _of_type(_able(nodes, job), job.gpu_type):
        types = sorted({n.gpu_type for n in nodes if n.gpu_type}) or ["none named"]
        return (
            f"no node has {job.gpu_type} GPUs; the GPU types here are {', '.join(types)}; "
            "change gpu_type or leave it out"
        )
    usable = _of_type(_able(nodes, job), job.gpu_type)
    kind = f"{job.gpu_type} " if job.gpu_type else ""
    want = job.least_gpus
    largest = max((n.num_gpus for n in usable), default=0)
    total = sum(n.num_gpus for n in usable)
    if want > total:
        return (
            f"no node has {want} {kind}GPUs; the largest has {largest}, "
            f"and all nodes together have {total}; ask for at most {total}"
        )
    if want <= largest:
        # It fits on one node by GPUs: then one node must also hold its CPUs and memory.
        fitting = [n for n in usable if n.num_gpus >= want]
        if job.cpus and not any(n.cpus >= job.cpus for n in fitting):
            most = max(n.cpus for n in fitting)
            return (
                f"no node with {want} {kind}GPUs has {job.cpus:g} CPUs; the most is {most:g}; "
                f"ask for at most {most:g} CPUs"
            )
        if job.memory_gb and not any(n.memory_gb >= job.memory_gb for n in fitting):
            most = max(n.memory_gb for n in fitting)
            return (
                f"no node with {want} {kind}GPUs has {job.memory_gb:g} GB of memory; "
                f"the most is {most:g} GB; ask for at most {most:g}G"
            )
    else:
        # A gang: CPUs and memory split over nodes by GPU share.
        if job.cpus and job.cpus > sum(n.cpus for n in usable):
            return f"the cluster has {sum(n.cpus for n in usable):g} CPUs in all; ask for fewer"
        if job.memory_gb and job.memory_gb > sum(n.memory_gb for n in usable):
            return f"the cluster has {sum(n.memory_gb for n in usable):g} GB in all; ask for less"
    return None


def waiting_reason(job: JobView, nodes: Sequence[NodeView], ahead: int | None) -> str:
    """A sentence for a pending job: what it needs, what is free, who is ahead.

    `ahead` is how many jobs the policy in force considers before this one
    (its `order`); None when the policy has no fixed order (it picks the
    next job by fit), so that no count is claimed.
    """
    # A drained node (`schedulearn nodes drain`) takes no new job: as good as down here.
    healthy = [n for n in nodes if n.healthy and not n.drained]
    drained = sorted(n.name for n in nodes if n.healthy and n.drained)
    tail = f"; {_plural(ahead, 'job')} ahead" if ahead else ""
    if drained:
        tail += f"; drained, taking no new job: {', '.join(drained)}"
    if not nodes:
        return "no node has joined yet; start an agent (schedulearn agent --server URL)" + tail
    if not healthy:
        if drained:
            return "no node takes new jobs (drained or down); `schedulearn nodes resume`" + tail
        return "every node is down; waiting for an agent to come back" + tail
    why = unrunnable(job, healthy)
    if why is not None:
        return f"no healthy node can run it: {why}" + tail
    usable = _of_type(_able(healthy, job), job.gpu_type)
    kind = f"{job.gpu_type} " if job.gpu_type else ""
    want = job.least_gpus
    if job.gpu_type and not usable:
        return f"needs {kind}GPUs; no healthy node has them" + tail
    most_free = max((n.num_free_gpus for n in usable), default=0)
    largest = max((n.num_gpus for n in usable), default=0)
    free_total = sum(n.num_free_gpus for n in usable)
    if want <= largest:
        if most_free < want:
            return (
                f"needs {want} {kind}GPUs on one node; the most free on any node is {most_free}"
                + tail
            )
        room = [n for n in usable if n.num_free_gpus >= want]
        if job.cpus and not any(n.free_cpus + 1e-9 >= job.cpus for n in room):
            best = max(n.free_cpus for n in room)
            return (
                f"needs {job.cpus:g} CPUs beside its GPUs; the most free on a node "
                f"with room is {best:g}" + tail
            )
        if job.memory_gb and not any(n.free_memory_gb + 1e-9 >= job.memory_gb for n in room):
            best = max(n.free_memory_gb for n in room)
            return (
                f"needs {job.memory_gb:g} GB beside its GPUs; the most free on a node "
                f"with room is {best:g} GB" + tail
            )
    elif free_total < want:
        return (
            f"needs {want} {kind}GPUs over several nodes (no node has {want}); "
            f"{free_total} are free" + tail
        )
    if ahead is None:
        return "resources are free; the policy picks which waiting job starts first"
    if ahead:
        return f"resources are free, but {_plural(ahead, 'job')} ahead wait first (policy order)"
    return "resources are free; it starts on the next scheduling pass"
