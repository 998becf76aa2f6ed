"""Who is looking at a page, and the errors pages show instead of JSON.

Owns `WebState` (hung on `app.state.web` by `install`: the templates and
the page secret, read once from the database) and the page dependencies:
`Viewer` (the signed-in user, from the session cookie; a browser that is
not signed in is sent to the sign-in page) and `check_csrf`.

Service errors become `PageError`s, rendered as an HTML page with the
service's message (which says what to change), because the app's own
handlers answer API callers in JSON.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

from fastapi import Depends, Request
from fastapi.templating import Jinja2Templates

from schedulearn.server.auth import Caller, Role
from schedulearn.server.errors import ServiceError
from schedulearn.server.state import AppState, get_state
from schedulearn.server.web import session as sessions

HERE = Path(__file__).parent
T = TypeVar("T")


@dataclass(slots=True)
class WebState:
    templates: Jinja2Templates
    _secret: bytes | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def secret(self, state: AppState) -> bytes:
        if self._secret is None:
            async with self._lock:
                if self._secret is None:
                    self._secret = await state.db.run(sessions.load_secret)
        return self._secret


class SignInNeeded(Exception):
    """The browser has no valid session; send it to the sign-in page."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class PageError(Exception):
    """An error shown as a page: a status, a title and what to do about it."""

    def __init__(self, status: int, message: str, title: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.title = title or _TITLES.get(status, "Something went wrong")


_TITLES = {
    400: "That request cannot be done",
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
    422: "That job cannot run here",
}


@dataclass(frozen=True, slots=True)
class Viewer:
    """The signed-in user of a page."""

    user: str
    role: Role
    csrf: str

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def caller(self) -> Caller:
        return Caller(self.user, self.role)


def web_state(request: Request) -> WebState:
    web: WebState = request.app.state.web
    return web


def sign_in_url(next_path: str) -> str:
    return f"/ui/login?next={quote(next_path, safe='/')}"


def safe_next(value: str | None) -> str:
    """Only paths of this dashboard are followed after signing in (no open redirect)."""
    if value and value.startswith("/ui/") and "//" not in value and "\\" not in value:
        return value
    return "/ui/cluster"


async def current_session(request: Request) -> sessions.WebSession | None:
    state = get_state(request)
    secret = await web_state(request).secret(state)
    return sessions.decode(request.cookies.get(sessions.SESSION_COOKIE), secret, state.clock.now())


async def viewer(request: Request) -> Viewer:
    state = get_state(request)
    ws = await current_session(request)
    who: Caller | None = None
    if ws is not None:
        who = await state.db.run(state.tokens.load, ws.token_hash)
    if ws is None or who is None or who.role is Role.AGENT:
        path = request.url.path
        if request.url.query:
            path += "?" + request.url.query
        raise SignInNeeded(path)
    return Viewer(user=who.user, role=who.role, csrf=ws.csrf)


Signed = Annotated[Viewer, Depends(viewer)]


def check_csrf(request: Request, who: Viewer, form_token: str | None) -> None:
    """Refuse a change whose CSRF token is not this session's."""
    given = form_token or request.headers.get(sessions.CSRF_HEADER)
    if not sessions.same_token(given, who.csrf):
        raise PageError(
            403,
            "this form is out of date or did not come from this dashboard; "
            "reload the page and try again",
            "Form expired",
        )


async def call(state: AppState, fn: Callable[..., T], *args: Any) -> T:
    """Run one service function on the database threads; its errors become pages."""
    try:
        return await state.db.run(fn, *args)
    except ServiceError as exc:
        raise PageError(exc.status, exc.message) from None
