"""/api/v1/users: users as records (admin): add, list, change, disable; a user's
web sign-in password (their own, or anyone's as admin).

Routers parse, call one service function, render. A change clears this
replica's token cache, so a disabled user's tokens stop working at once
and a new priority limit applies to the next submission.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from schedulearn.protocol import (
    USER_NAME_PATTERN,
    PasswordSet,
    PasswordSetReply,
    UserCreate,
    UserList,
    UserPublic,
    UserUpdate,
)
from schedulearn.server.api.deps import Admin, State, User
from schedulearn.server.errors import ERROR_RESPONSES
from schedulearn.server.services import passwords, users

router = APIRouter(prefix="/api/v1/users", tags=["users"], responses=ERROR_RESPONSES)

UserName = Annotated[str, Path(min_length=1, max_length=100, pattern=USER_NAME_PATTERN)]


@router.get("", response_model=UserList, summary="Users (admin)")
async def list_users(state: State, _who: Admin) -> UserList:
    return await state.db.run(users.list_users, state.tokens.default)


@router.post("", response_model=UserPublic, status_code=201, summary="Add a user (admin)")
async def add_user(body: UserCreate, state: State, _who: Admin) -> UserPublic:
    return await state.db.run(users.add, body, state.clock.now(), state.tokens.default)


@router.patch(
    "/{name}",
    response_model=UserPublic,
    summary="Change a user (admin): unix account, root, priority limit, disabled",
)
async def update_user(name: UserName, body: UserUpdate, state: State, who: Admin) -> UserPublic:
    changed = await state.db.run(
        users.update, who, name, body, state.clock.now(), state.tokens.default
    )
    state.tokens.forget()
    return changed


@router.put(
    "/{name}/password",
    response_model=PasswordSetReply,
    summary="Set a web sign-in password: your own, or anyone's (admin)",
)
async def set_password(
    name: UserName, body: PasswordSet, state: State, who: User
) -> PasswordSetReply:
    return await state.db.run(passwords.set_password, who, name, body.password, state.clock.now())
