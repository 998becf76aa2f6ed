"""/api/v1/nodes, /api/v1/policy, /api/v1/whoami (tokens: `api.tokens`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from schedulearn.protocol import (
    NodeList,
    NodePublic,
    PolicyPreview,
    PolicyPublic,
    PolicySet,
    WhoAmI,
)
from schedulearn.server.api.deps import Admin, State, User
from schedulearn.server.errors import ERROR_RESPONSES
from schedulearn.server.services import nodes, policy

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES)


@router.get("/nodes", response_model=NodeList, tags=["nodes"], summary="Nodes and their GPUs")
async def list_nodes(state: State, _who: User) -> NodeList:
    return await state.db.run(nodes.list_nodes, dict(state.samples))


NodeName = Annotated[str, Path(min_length=1, max_length=200)]


@router.post(
    "/nodes/{name}/drain",
    response_model=NodePublic,
    tags=["nodes"],
    summary="Drain a node (admin): its running jobs go on, no new job starts there",
)
async def drain_node(
    name: NodeName,
    state: State,
    _who: Admin,
    reason: Annotated[
        str,
        Query(
            max_length=nodes.REASON_CHARS,
            description="Why (shown in `schedulearn nodes` and on the Cluster page)",
        ),
    ] = "",
) -> NodePublic:
    shown, changes = await state.db.run(nodes.set_drained, name, True, dict(state.samples), reason)
    state.wakeups.notify(changes)
    return shown


@router.post(
    "/nodes/{name}/resume",
    response_model=NodePublic,
    tags=["nodes"],
    summary="Resume a drained node (admin): it takes new jobs again; its drain reason is cleared",
)
async def resume_node(name: NodeName, state: State, _who: Admin) -> NodePublic:
    shown, changes = await state.db.run(nodes.set_drained, name, False, dict(state.samples))
    state.wakeups.notify(changes)
    return shown


@router.get("/policy", response_model=PolicyPublic, tags=["policy"], summary="The policy in force")
async def get_policy(state: State, _who: User) -> PolicyPublic:
    return await state.db.run(policy.get, state.settings.default_policy)


@router.get(
    "/policy/preview",
    response_model=PolicyPreview,
    tags=["policy"],
    summary="The current queue simulated under each policy: predicted mean JCT, "
    "makespan and utilisation side by side",
)
async def preview_policy(
    state: State,
    _who: User,
    policies: Annotated[
        str | None,
        Query(
            max_length=2000,
            description="Comma-separated policy specs (default: every registered policy)",
        ),
    ] = None,
) -> PolicyPreview:
    return await state.predictions.preview(policies)


@router.put(
    "/policy",
    response_model=PolicyPublic,
    tags=["policy"],
    summary="Switch the policy (admin); in force from the next pass",
)
async def set_policy(body: PolicySet, state: State, _who: Admin) -> PolicyPublic:
    result = await state.db.run(policy.set_spec, body.spec)
    state.wakeups.wake_scheduler()
    return result


@router.get("/whoami", response_model=WhoAmI, tags=["tokens"], summary="Who this token is")
async def whoami(who: User) -> WhoAmI:
    bounds = who.priority
    return WhoAmI(
        user=who.user,
        role=who.role.value,
        priority_min=bounds.low if bounds else None,
        priority_max=bounds.high if bounds else None,
    )
