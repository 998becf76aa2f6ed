"""Who is looking at a page, and the errors pages show instead of JSON.

Owns `WebState` (hung on `app.state.web` by `install`: the templates) and
the page dependencies: `Viewer` (the signed-in user, from the server-side
session the cookie names; a browser that is not signed in is sent to the
sign-in page, one whose session ended gets 401 and the sign-in form) and
`check_csrf`.

Service errors become `PageError`s, rendered as an HTML page with the
service's message (which says what to change), because the app's own
handlers answer API callers in JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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


class SignInNeeded(Exception):
    """The browser has no working session; send it to the sign-in page.

    `ended`: it sent a session cookie that no longer works (signed out, its
    token revoked or expired, its user disabled), answered 401.
    """

    def __init__(self, next_path: str, ended: bool = False) -> None:
        super().__init__(next_path)
        self.next_path = next_path
        self.ended = ended


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

    caller: Caller
    csrf: str

    @property
    def user(self) -> str:
        return self.caller.user

    @property
    def role(self) -> Role:
        return self.caller.role

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN


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


async def viewer(request: Request) -> Viewer:
    state = get_state(request)
    cookie = request.cookies.get(sessions.SESSION_COOKIE)
    signed: sessions.Signed | None = None
    if cookie:
        signed = await state.db.run(
            sessions.resolve, cookie, state.clock.now(), state.tokens.default
        )
    if signed is None or signed.caller.role is Role.AGENT:
        path = request.url.path
        if request.url.query:
            path += "?" + request.url.query
        raise SignInNeeded(path, ended=bool(cookie))
    return Viewer(signed.caller, signed.csrf)


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
