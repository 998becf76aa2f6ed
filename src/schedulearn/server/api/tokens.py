"""/api/v1/tokens: make (admin), list and revoke API tokens; /api/v1/web-login: a
one-time link that signs a browser in with the calling token.

Routers parse, call one service function, render. A revocation also
clears this replica's token cache, so the token stops working at once.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from schedulearn.protocol import TokenCreate, TokenInfo, TokenList, TokenPublic, WebLoginLink
from schedulearn.server.api.deps import Admin, State, User
from schedulearn.server.errors import ERROR_RESPONSES
from schedulearn.server.services import login_codes, tokens

router = APIRouter(prefix="/api/v1/tokens", tags=["tokens"], responses=ERROR_RESPONSES)
web_login_router = APIRouter(prefix="/api/v1", tags=["tokens"], responses=ERROR_RESPONSES)

TokenId = Annotated[int, Path(ge=1, le=2**62, description="A token's id (`token list`)")]


@router.post(
    "",
    response_model=TokenPublic,
    status_code=201,
    summary="New token (admin); its secret is shown once, in this reply",
)
async def create_token(body: TokenCreate, state: State, who: Admin) -> TokenPublic:
    return await state.db.run(tokens.create, who, body, state.clock.now())


@router.get(
    "",
    response_model=TokenList,
    summary="Tokens (never their secrets): your own, or (admin) everyone's",
)
async def list_tokens(
    state: State,
    who: User,
    user: Annotated[str | None, Query(max_length=100, description="Only this user's")] = None,
    all: Annotated[bool, Query(description="Also revoked and expired ones")] = False,
) -> TokenList:
    return await state.db.run(tokens.list_tokens, who, user, all, state.clock.now())


@router.delete(
    "/{token_id}",
    response_model=TokenInfo,
    summary="Revoke a token (yours, or any as admin): it and its web sessions stop at once",
)
async def revoke_token(token_id: TokenId, state: State, who: User) -> TokenInfo:
    revoked = await state.db.run(tokens.revoke, who, token_id, state.clock.now())
    state.tokens.forget()
    return revoked


@web_login_router.post(
    "/web-login",
    response_model=WebLoginLink,
    status_code=201,
    summary="A one-time link (a few minutes, once) that signs a browser in with this token",
)
async def web_login(state: State, who: User) -> WebLoginLink:
    return await state.db.run(
        login_codes.create, who, state.clock.now(), state.settings.web_login_seconds
    )
