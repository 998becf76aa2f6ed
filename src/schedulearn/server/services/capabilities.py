"""Node capabilities as the server keeps them: from a registration to the node's row and back.

Owns the mapping between the wire (`protocol.CapabilitiesReport`), the
`Node.capabilities` JSON column and the core's `NodeCapabilities`, which
the snapshot puts on every `NodeView` and the feasibility rule reads.
"""

from __future__ import annotations

from schedulearn.core.capabilities import ExecutorKind, NodeCapabilities
from schedulearn.protocol import CapabilitiesReport, Executor, NodeRegistration


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


def from_row(stored: object) -> NodeCapabilities:
    """The node row's JSON column as core capabilities (None: a plain process node)."""
    return NodeCapabilities.from_dict(stored if isinstance(stored, dict) else None)


def report(caps: NodeCapabilities) -> CapabilitiesReport:
    """Core capabilities for the user API (`schedulearn nodes`)."""
    return CapabilitiesReport(
        executors=sorted(e.value for e in caps.executors),
        container_runtime=caps.container_runtime,
        labels=sorted(caps.labels),
        accounts=None if caps.accounts is None else sorted(caps.accounts),
    )
