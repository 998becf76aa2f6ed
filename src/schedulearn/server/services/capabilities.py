"""Node capabilities as an agent registers them.

Owns the one place that turns a registration into the core's
`NodeCapabilities`: the agent's report (`protocol.CapabilitiesReport`),
or, from an agent older than capability reports, what its executors'
names imply. `nodes.apply_registration` stores the result in the
`node.capabilities` column (declared on `core.views.NodeView`), from
which the snapshot and `schedulearn nodes` read it back by name.
"""

from __future__ import annotations

from schedulearn.core.capabilities import ExecutorKind, NodeCapabilities
from schedulearn.protocol import Executor, NodeRegistration


def capabilities_of(reg: NodeRegistration) -> NodeCapabilities:
    """What the registering node can run, as it reported it.

    An agent older than capability reports sent only its executors' names;
    this is the one place that reads them (subprocess runs host processes,
    docker runs containers with the Docker engine it reached).
    """
    if reg.capabilities is not None:
        return NodeCapabilities.from_dict(reg.capabilities.model_dump())
    kinds = {Executor.SUBPROCESS: ExecutorKind.PROCESS, Executor.DOCKER: ExecutorKind.CONTAINER}
    offered = frozenset(kinds[e] for e in reg.executors if e in kinds)
    runtime = "docker" if ExecutorKind.CONTAINER in offered else ""
    return NodeCapabilities(executors=offered, container_runtime=runtime)
