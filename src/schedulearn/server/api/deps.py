"""Request dependencies: the app state and who is calling (from the bearer token):
a user or an admin (`user`, `admin`), or a node agent (`agent`: its node credential).

Every route names one of `User`, `Admin` or `Agent`, so every route checks a role.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from schedulearn.server.auth import Caller, Refusal, Role, hash_token
from schedulearn.server.errors import Forbidden, Unauthorized
from schedulearn.server.services import enrollment
from schedulearn.server.services.enrollment import AgentIdentity
from schedulearn.server.state import AppState, get_state

_bearer = HTTPBearer(auto_error=False, description="A token from `schedulearn up` or an admin")


async def _state(request: Request) -> AppState:
    # async, so FastAPI calls it on the event loop (a plain def would cost a
    # thread-pool hop on every request).
    return get_state(request)


State = Annotated[AppState, Depends(_state)]


async def authenticate(state: AppState, token: str) -> Caller | Refusal:
    """Who a token stands for, or why it does not work (unknown, revoked, expired, disabled)."""
    now = state.clock.now()
    digest, known = state.tokens.cached(token, now)
    if known is not None:
        return known
    loading = state.tokens.loading.get(digest)
    if loading is None:
        loading = asyncio.ensure_future(state.db.run(state.tokens.load, digest, now))
        state.tokens.loading[digest] = loading
        loading.add_done_callback(lambda _: state.tokens.loading.pop(digest, None))
    # Shielded: one caller giving up does not cancel the check the others wait on.
    return await asyncio.shield(loading)


async def caller(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    if creds is None or not creds.credentials:
        raise Unauthorized(
            "no token; pass --token, set SCHEDULEARN_TOKEN, or run `schedulearn up` to write one"
        )
    known = await authenticate(get_state(request), creds.credentials)
    if isinstance(known, Refusal):
        raise Unauthorized(known.reason)
    return known


async def user(who: Annotated[Caller, Depends(caller)]) -> Caller:
    if who.role is Role.AGENT:
        raise Forbidden("an agent token may only call /api/v1/agent routes")
    return who


async def admin(who: Annotated[Caller, Depends(caller)]) -> Caller:
    if who.role is not Role.ADMIN:
        raise Forbidden("this needs an admin token")
    return who


async def agent(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> AgentIdentity:
    """The node an agent request acts as (`services.enrollment`; cached briefly).

    What that node may touch is decided in `services.agent_access`.
    """
    if creds is None or not creds.credentials:
        raise Unauthorized(
            "no agent credential; start the agent with --join-token-file (from "
            "`schedulearn node add NAME`) or --token-file"
        )
    state = get_state(request)
    digest = hash_token(creds.credentials)
    now = state.clock.now()
    who = state.credentials.get(digest, now)
    if who is None:
        who = await state.db.run(enrollment.identify, digest, now)
        state.credentials.keep(who, now)
    return who


User = Annotated[Caller, Depends(user)]
Admin = Annotated[Caller, Depends(admin)]
Agent = Annotated[AgentIdentity, Depends(agent)]

JOB_ID_MAX = 2**62
JobId = Annotated[int, Path(ge=1, le=JOB_ID_MAX, description="A job's number")]
