"""Sign in with a token (a server-side session starts), sign out (it ends at once);
`/` and `/ui` lead to the Cluster page.

Routers parse, call one service function, render.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from schedulearn.server import auth
from schedulearn.server.api.deps import State, authenticate
from schedulearn.server.auth import Role
from schedulearn.server.web import session as sessions
from schedulearn.server.web.deps import Signed, check_csrf, safe_next
from schedulearn.server.web.render import page, redirect

router = APIRouter(include_in_schema=False)


@router.get("/")
@router.get("/ui")
@router.get("/ui/")
async def home() -> RedirectResponse:
    return RedirectResponse("/ui/cluster", status_code=307)


def login_form_page(
    request: Request, next_path: str, error: str | None = None, status: int = 200
) -> HTMLResponse:
    """The sign-in form (with a fresh double-submit nonce), at any URL and status."""
    nonce = sessions.new_login_nonce()
    response = page(
        request, "login.html", None, status=status, next=next_path, nonce=nonce, error=error
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


@router.get("/ui/login", response_class=HTMLResponse)
async def login_form(request: Request, next: str | None = None) -> HTMLResponse:
    return login_form_page(request, safe_next(next))


@router.post("/ui/login", response_model=None)
async def login(
    request: Request,
    state: State,
    token: Annotated[str, Form(max_length=500)] = "",
    nonce: Annotated[str, Form(max_length=100)] = "",
    next: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    target = safe_next(next)
    if not sessions.same_token(request.cookies.get(sessions.LOGIN_COOKIE), nonce):
        return login_form_page(request, target, "The sign-in form expired; try again.", 403)
    token = token.strip()
    if not token:
        return login_form_page(request, target, "Paste your token to sign in.", 400)
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
    response = redirect(target, f"Signed in as {who.user} ({who.role.value}).")
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


@router.post("/ui/logout")
async def logout(
    request: Request,
    state: State,
    who: Signed,
    csrf: Annotated[str, Form(max_length=200)] = "",
) -> RedirectResponse:
    check_csrf(request, who, csrf)
    await state.db.run(sessions.end, request.cookies.get(sessions.SESSION_COOKIE, ""))
    response = redirect("/ui/login", "Signed out.")
    response.delete_cookie(sessions.SESSION_COOKIE, path="/")
    return response
