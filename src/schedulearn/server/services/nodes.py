"""Nodes and their GPUs as users see them (`schedulearn nodes`)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlmodel import Session

from schedulearn.protocol import GpuPublic, GpuSample, NodeList, NodePublic
from schedulearn.server.services import capabilities, snapshot


def list_nodes(session: Session, samples: Mapping[str, list[GpuSample]]) -> NodeList:
    views, _, rows = snapshot.load_nodes(session)
    items = []
    for view in views:
        row = rows[view.name]
        by_index = {s.index: s for s in samples.get(view.name, ())}
        items.append(
            NodePublic(
                name=view.name,
                address=row.address,
                healthy=row.healthy,
                cpus=row.cpus,
                memory_gb=row.memory_gb,
                executors=list(row.executors),
                last_seen=row.last_seen,
                capabilities=capabilities.report(view.capabilities),
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
