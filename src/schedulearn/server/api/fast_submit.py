"""`POST /api/v1/jobs` answered without FastAPI's per-request machinery.

Submissions are the API's busiest route, and FastAPI's routing and
dependency solving cost about a third of the server's CPU for each
(1.2-1.5 ms of CPU a submission with them, 0.8-0.9 ms without, from 32
clients on a 2-core machine). `FastSubmit` sits in the app's
middleware stack below the protocol check and the body limit, so both
still judge every request, and answers a submission whose caller it
already knows: a bearer token in this replica's token cache
(`auth.TokenCache`), of a user or an admin, with a well-formed
`Idempotency-Key` if any. It then does what the route does, with the same
function (`jobs.accept`), and renders a refusal with the app's own error
handlers (`errors.install`), so a client cannot tell the two apart
(tests/integration/test_fast_submit.py holds them to that).

Anything else goes on, untouched, to the FastAPI route: the first request
of a token (checked in the database there), a refused or unknown token,
an agent's token, a malformed key. The route stays the documented one
(OpenAPI) and the answer to every case this module does not take.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from schedulearn.server.api import jobs
from schedulearn.server.api.below import JSON, answer, app_state, bearer_token, read_body
from schedulearn.server.auth import Caller, Role
from schedulearn.server.services.idempotency import MAX_KEY_LENGTH
from schedulearn.server.state import AppState


class FastSubmit:
    """ASGI middleware: serve `POST /api/v1/jobs` of a known caller directly."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The route itself: its path is the one served here, and routing
        # would have put it in the scope, where the protocol check reads its
        # model (to leave out of the reply the fields an older client does
        # not know).
        self.route = next(
            r for r in jobs.router.routes if isinstance(r, APIRoute) and r.endpoint is jobs.submit
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.route.path:
            await self.app(scope, receive, send)
            return
        state = app_state(scope)
        request = Request(scope, receive)  # the headers and body as the route reads them
        who = _known_caller(state, request.headers.get("authorization"))
        key = request.headers.get(jobs.IDEMPOTENCY_HEADER)
        if who is None or (key is not None and not 1 <= len(key) <= MAX_KEY_LENGTH):
            await self.app(scope, receive, send)  # the route answers (and refuses)
            return
        body = await read_body(request)
        if body is None:
            return  # the client went away
        content_type = request.headers.get("content-type", JSON)
        scope["route"] = self.route
        await answer(
            scope, receive, send, request, lambda: jobs.accept(state, who, key, body, content_type)
        )


def _known_caller(state: AppState, authorization: str | None) -> Caller | None:
    """The user or admin a bearer token stands for, if this replica's cache
    holds it; None sends the request on to the route, which checks it."""
    token = bearer_token(authorization)
    if token is None:
        return None
    _, who = state.tokens.cached(token, state.clock.now())
    if who is None or who.role is Role.AGENT:
        return None
    return who
