"""/api/v1/nodes (admin): enroll a node (a one-time join token) and remove one.

`POST /api/v1/nodes` makes the join token `schedulearn node add` prints;
`DELETE /api/v1/nodes/{name}` revokes the node's credential and removes it
(`schedulearn node rm`). The rules are in `services.enrollment`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from schedulearn.protocol import JoinTokenPublic, NodeAdd, NodeRemoved
from schedulearn.server.api.deps import Admin, State
from schedulearn.server.errors import ERROR_RESPONSES
from schedulearn.server.services import enrollment

router = APIRouter(prefix="/api/v1/nodes", tags=["nodes"], responses=ERROR_RESPONSES)


@router.post(
    "",
    response_model=JoinTokenPublic,
    status_code=201,
    summary="Enroll a node (admin): a one-time join token for its agent",
)
async def add_node(body: NodeAdd, state: State, _who: Admin) -> JoinTokenPublic:
    return await state.db.run(
        enrollment.add_node, body.name, state.clock.now(), body.expires_seconds
    )


@router.delete(
    "/{name}",
    response_model=NodeRemoved,
    summary="Remove a node (admin): revoke its credential, requeue its jobs",
)
async def remove_node(
    name: Annotated[str, Path(min_length=1, max_length=200)], state: State, _who: Admin
) -> NodeRemoved:
    removed, changes = await state.db.run(enrollment.remove_node, name, state.clock.now())
    state.credentials.forget_node(name)
    if state.heartbeats is not None:
        state.heartbeats.forget([name])
    state.shape.invalidate()
    state.samples.pop(name, None)
    state.orphan_stops.pop(name, None)
    state.wakeups.notify(changes)
    # End the node's long poll now: its next call is refused.
    state.wakeups.wake_nodes([name])
    return removed
