"""What the routes served below FastAPI share (`fast_submit`, `fast_agent`).

A middleware in this package answers one busy route itself when it knows
the caller from a cache and can read the request, with the same function
the route calls; anything else goes on to the route. These helpers keep
the two ways alike: the bearer token read as FastAPI's `HTTPBearer` reads
it, an exception rendered by the app's own handlers, and a body already
read handed on to the route unchanged. `json_reply` is the busy routes'
reply, theirs and the middleware's alike.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from schedulearn.server.state import AppState

JSON = "application/json"


def json_reply(reply: BaseModel, status_code: int = 200) -> Response:
    """A busy route's reply, serialised once (a model a route returns is first
    validated against the route's response model again)."""
    return Response(reply.model_dump_json(), status_code=status_code, media_type=JSON)


def app_state(scope: Scope) -> AppState:
    """The state of the app a request came to."""
    app: FastAPI = scope["app"]
    state: AppState = app.state.sl
    return state


async def read_body(request: Request) -> bytes | None:
    """The request's body; None when the client went away before sending it all."""
    try:
        return await request.body()
    except ClientDisconnect:
        return None


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header; None for any other."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def is_json(content_type: str | None) -> bool:
    """A JSON body, as FastAPI reads one for a model parameter."""
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


async def answer(
    scope: Scope,
    receive: Receive,
    send: Send,
    request: Request,
    reply: Callable[[], Awaitable[Response]],
) -> None:
    """Send `reply()`; an exception it raises is rendered by the app's handler
    for it, as a route's would be (a crash goes on up, to the app's 500)."""
    app: FastAPI = scope["app"]
    try:
        response = await reply()
    except Exception as exc:
        handler = handler_for(app, exc)
        if handler is None:
            raise
        response = handler(request, exc)
        if inspect.isawaitable(response):
            response = await response
    await response(scope, receive, send)


def handler_for(app: FastAPI, exc: Exception) -> Any:
    """The app's handler for `exc`, found as Starlette's ExceptionMiddleware
    finds it (the nearest class up `exc`'s MRO); the catch-all `Exception`
    handler is left to ServerErrorMiddleware, as it is for a route."""
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        if cls in app.exception_handlers:
            return app.exception_handlers[cls]
    return None


def replay(body: bytes, receive: Receive) -> Receive:
    """`receive` for the route, giving it first the body read already."""
    pending = True

    async def again() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again
