"""Sign in (a server-side session starts) with a user name and password, a
one-time link from `schedulearn web-login`, or a pasted token; sign out (it
ends at once); `/` and `/ui` lead to the Cluster page.

Failed password sign-ins are counted per client address and user name
(`server.throttle`) and each waits `FAILURE_DELAY_SECONDS`; the refusal is
the same whether or not the user exists (`services.passwords`).

Routers parse, call one service function, render.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from schedulearn.server import auth
from schedulearn.server.api.deps import State, authenticate
from schedulearn.server.auth import Caller, Role
from schedulearn.server.services import login_codes, passwords
from schedulearn.server.services.passwords import Refused
from schedulearn.server.web import session as sessions
from schedulearn.server.web.deps import Signed, check_csrf, safe_next
from schedulearn.server.web.render import page, redirect

router = APIRouter(include_in_schema=False)

FAILURE_DELAY_SECONDS = 0.5


@router.get("/")
@router.get("/ui")
@router.get("/ui/")
async def home() -> RedirectResponse:
    return RedirectResponse("/ui/cluster", status_code=307)


def login_form_page(
    request: Request,
    next_path: str,
    error: str | None = None,
    status: int = 200,
    user: str = "",
    link: LinkOffer | None = None,
) -> HTMLResponse:
    """The sign-in form (with a fresh double-submit nonce), at any URL and status;
    with `link`, the confirmation of a one-time link instead."""
    nonce = sessions.new_login_nonce()
    response = page(
        request,
        "login.html",
        None,
        status=status,
        next=next_path,
        nonce=nonce,
        error=error,
        user=user,
        link=link,
    )
    response.set_cookie(
        sessions.LOGIN_COOKIE,
        nonce,
        max_age=3600,
        path="/ui/login",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@dataclass(frozen=True, slots=True)
class LinkOffer:
    """A one-time link that works, shown for confirmation before it is used."""

    code: str
    caller: Caller


@router.get("/ui/login", response_class=HTMLResponse)
async def login_form(
    request: Request,
    state: State,
    next: str | None = None,
    code: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    target = safe_next(next)
    if not code:
        return login_form_page(request, target)
    # Opening a link only asks; the code is used by the button (a link
    # previewer that fetches it, or a page that embeds it, signs no one in).
    found = await state.db.run(login_codes.peek, code, state.clock.now(), state.tokens.default)
    if isinstance(found, Refused):
        return login_form_page(request, target, found.reason, 400)
    return login_form_page(request, target, link=LinkOffer(code, found))


def _signed_in(
    request: Request, target: str, session_id: str, user: str, role: Role
) -> RedirectResponse:
    response = redirect(target, f"Signed in as {user} ({role.value}).")
    response.set_cookie(
        sessions.SESSION_COOKIE,
        session_id,
        max_age=int(sessions.SESSION_SECONDS),
        path="/",
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
    response.delete_cookie(sessions.LOGIN_COOKIE, path="/ui/login")
    return response


@router.post("/ui/login", response_model=None)
async def login(
    request: Request,
    state: State,
    token: Annotated[str, Form(max_length=500)] = "",
    user: Annotated[str, Form(max_length=100)] = "",
    password: Annotated[str, Form(max_length=1000)] = "",
    code: Annotated[str, Form(max_length=200)] = "",
    nonce: Annotated[str, Form(max_length=100)] = "",
    next: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    target = safe_next(next)
    if not sessions.same_token(request.cookies.get(sessions.LOGIN_COOKIE), nonce):
        return login_form_page(request, target, "The sign-in form expired; try again.", 403)
    token, user = token.strip(), user.strip()
    if code:
        return await _with_link(request, state, target, code)
    if token and (user or password):
        return login_form_page(
            request, target, "Give a user name and password, or a token, not both.", 400, user
        )
    if token:
        return await _with_token(request, state, target, token)
    if user or password:
        return await _with_password(request, state, target, user, password)
    return login_form_page(
        request, target, "Give your user name and password (or paste a token).", 400
    )


async def _with_password(
    request: Request, state: State, target: str, user: str, password: str
) -> Response:
    if not user or not password:
        missing = "user name" if not user else "password"
        return login_form_page(request, target, f"Give your {missing} too.", 400, user)
    address = request.client.host if request.client else ""
    wait = state.sign_ins.wait_seconds(address, user, state.clock.now())
    if wait > 0:
        minutes = max(1, math.ceil(wait / 60))
        return login_form_page(
            request,
            target,
            f"Too many failed sign-ins for {user} from here; try again in {minutes} "
            f"minute{'s' if minutes > 1 else ''}, or use `schedulearn web-login`.",
            429,
            user,
        )
    now = state.clock.now()
    result = await state.db.run(passwords.sign_in, user, password, now, sessions.SESSION_SECONDS)
    if isinstance(result, Refused):
        state.sign_ins.failed(address, user, now)
        # Every failure costs the guesser a moment, on top of the count above.
        await asyncio.sleep(FAILURE_DELAY_SECONDS)
        return login_form_page(request, target, result.reason, 401, user)
    state.sign_ins.succeeded(address, user)
    session_id, _csrf = await state.db.run(sessions.start, result.token_id, now, True)
    return _signed_in(request, target, session_id, result.user, result.role)


async def _with_link(request: Request, state: State, target: str, code: str) -> Response:
    now = state.clock.now()
    found = await state.db.run(login_codes.use, code, now, state.tokens.default)
    if isinstance(found, Refused):
        return login_form_page(request, target, found.reason, 400)
    assert found.token_id is not None  # codes are made only for callers with a token
    session_id, _csrf = await state.db.run(sessions.start, found.token_id, now)
    return _signed_in(request, target, session_id, found.user, found.role)


async def _with_token(request: Request, state: State, target: str, token: str) -> Response:
    who = await authenticate(state, token)
    if who is auth.UNKNOWN:
        return login_form_page(
            request,
            target,
            "Unknown token. Use the one `schedulearn up` wrote to your CLI config, "
            "or ask an admin for one (schedulearn token create --user NAME).",
            401,
        )
    if isinstance(who, auth.Refusal):
        return login_form_page(request, target, f"Cannot sign in: {who.reason}.", 401)
    if who.role is Role.AGENT or who.token_id is None:
        return login_form_page(
            request, target, "That is an agent token; sign in with a user or admin token.", 403
        )
    session_id, _csrf = await state.db.run(sessions.start, who.token_id, state.clock.now())
    return _signed_in(request, target, session_id, who.user, who.role)


@router.post("/ui/logout")
async def logout(
    request: Request,
    state: State,
    who: Signed,
    csrf: Annotated[str, Form(max_length=200)] = "",
) -> RedirectResponse:
    check_csrf(request, who, csrf)
    await state.db.run(
        sessions.end, request.cookies.get(sessions.SESSION_COOKIE, ""), state.clock.now()
    )
    response = redirect("/ui/login", "Signed out.")
    response.delete_cookie(sessions.SESSION_COOKIE, path="/")
    return response
