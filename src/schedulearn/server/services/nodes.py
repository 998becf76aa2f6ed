"""Nodes as agents register them and as users see them (`schedulearn nodes`).

Both directions go by name: a registration field is stored in the `node`
column of the same name, and a public field is read from it, so a field
declared on `core.views.NodeView` needs no edit here.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlmodel import Session

from schedulearn.protocol import GpuPublic, GpuSample, NodeList, NodePublic, NodeRegistration
from schedulearn.server.errors import BadRequest, NotFound
from schedulearn.server.models import Node
from schedulearn.server.services import snapshot
from schedulearn.server.services.capabilities import capabilities_of
from schedulearn.server.wakeups import Changes

_NODE_COLUMNS = frozenset(Node.__table__.columns.keys())
# Registration fields kept in the column of the same name (the GPUs have their own table).
REGISTERED = frozenset(n for n in NodeRegistration.model_fields if n in _NODE_COLUMNS)
# Public fields read from the column of the same name; `gpus` is built from the GPU table.
_SHOWN = tuple(n for n in NodePublic.model_fields if n in _NODE_COLUMNS)
# The longest drain reason kept: a sentence, shown in a table cell.
REASON_CHARS = 200


def apply_registration(node: Node, reg: NodeRegistration) -> None:
    """Store what an agent registered, every field by name, in its JSON form.

    `capabilities` is the one field whose wire form differs from the
    stored one: an agent older than capability reports sends none, so it
    is derived from the executors it names (`capabilities_of`), and it is
    stored as `NodeCapabilities.as_dict()` (sorted, unknown kinds dropped).
    """
    stored = reg.model_dump(mode="json", include=set(REGISTERED))
    stored["capabilities"] = capabilities_of(reg).as_dict()
    for name, value in stored.items():
        setattr(node, name, value)


def list_nodes(session: Session, samples: Mapping[str, list[GpuSample]]) -> NodeList:
    views, _, rows = snapshot.load_nodes(session)
    items = []
    for view in views:
        row = rows[view.name]
        by_index = {s.index: s for s in samples.get(view.name, ())}
        items.append(
            NodePublic(
                **{n: getattr(row, n) for n in _SHOWN},
                gpus=[
                    GpuPublic(
                        index=g.index,
                        uuid=g.uuid,
                        type=g.type,
                        memory_mb=g.memory_mb,
                        job_id=g.job_id,
                        utilization_pct=by_index[g.index].utilization_pct
                        if g.index in by_index
                        else None,
                        memory_used_mb=by_index[g.index].memory_used_mb
                        if g.index in by_index
                        else None,
                    )
                    for g in view.gpus
                ],
            )
        )
    return NodeList(items=items)


def set_drained(
    session: Session,
    name: str,
    drained: bool,
    samples: Mapping[str, list[GpuSample]],
    reason: str = "",
) -> tuple[NodePublic, Changes]:
    """Drain a node (its running jobs go on; no new job starts there) or resume it.

    Draining stores `reason` (draining again replaces it); resuming clears it,
    so a node's reason is always that of the drain in force."""
    node = session.get(Node, name)
    if node is None:
        raise NotFound(f"no node {name!r}; list the nodes with `schedulearn nodes`")
    text = " ".join(reason.split())  # one line: it is shown in a table cell
    if len(text) > REASON_CHARS:
        raise BadRequest(f"the drain reason is {len(text)} characters; keep it to {REASON_CHARS}")
    node.drained = drained
    node.drain_reason = text if drained else ""
    session.commit()
    shown = next(n for n in list_nodes(session, samples).items if n.name == name)
    return shown, Changes(scheduler=not drained)
