"""Round robin: jobs start in arrival order and the servers take turns: each
job goes on the next server after the one used last that can hold it
(a gang over the fewest servers when no single server can). Source: the
original Schedulearn (its thesis, section 4.4.2 "Round Robin").

Rule in full: take pending jobs oldest first. Each job goes on the first
server, counting from the one after the server used last and wrapping
around, that can hold the whole job; a job that no single server can
hold right now spreads over the fewest servers as a gang. When the
oldest job cannot start, later jobs wait behind it, as in FIFO.
Spreading consecutive jobs over the servers balances their load.

State: this is the one built-in policy that remembers something between
passes: the name of the server it used last (`last_node`). Two passes
over the same snapshot can therefore place a job differently. A fresh
instance (a restart, a policy switch) starts again from the first
server. The pointer moves when the policy decides, so if the host
rejects a pass the next job still goes to the following server, which
keeps the turns fair anyway.
"""

from __future__ import annotations

from typing import ClassVar

from schedulearn.core.decisions import Decision, Start
from schedulearn.core.placement import FreePool
from schedulearn.core.policy import QueueOrder, arrival_order
from schedulearn.core.registry import register
from schedulearn.core.views import ClusterView, Placement


@register
class RoundRobin:
    name: ClassVar[str] = "round-robin"
    tick_seconds: ClassVar[float | None] = None

    def __init__(self) -> None:
        # The server used last; the next job tries the server after it first.
        self.last_node: str | None = None

    def order(self, view: ClusterView) -> QueueOrder:
        return arrival_order(view, "arrival order; the head waits for room, servers take turns")

    def decide(self, view: ClusterView) -> list[Decision]:
        if not view.pending:
            return []
        pool = FreePool(view)
        decisions: list[Decision] = []
        free = pool.total_free()
        for job in self.order(view).jobs:
            if job.gpus > free:
                break
            placement = pool.first_fit(job, after=self.last_node)
            if placement is None and job.gpus > 1:
                placement = pool.gang(job)
            if placement is None:
                break
            pool.take(job, placement)
            free -= placement.num_gpus
            self.last_node = _last_in_cluster_order(view, placement)
            decisions.append(Start(job.id, placement))
        return decisions


def _last_in_cluster_order(view: ClusterView, placement: Placement) -> str:
    """The placement's node that comes last in the cluster's server list
    (a gang's turn ends on its last server)."""
    if placement.num_nodes == 1:
        return placement.nodes[0]
    used = set(placement.nodes)
    return [node.name for node in view.nodes if node.name in used][-1]
