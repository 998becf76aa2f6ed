"""An agent's event batches and work polls answered without FastAPI's
per-request machinery.

An agent sends these two for every few jobs it runs: `POST
/api/v1/agent/events` (its jobs' starts and exits) and `GET
/api/v1/agent/work` (the long poll for starts and stops). FastAPI's
routing, dependency solving and body validation were about 8% of the
server's samples under `bench/api_load.py` (py-spy).
`FastAgent` sits in the app's middleware stack beside `fast_submit`
(below the protocol check and the body limit, which still judge every
request) and answers a request whose credential this replica's cache
holds (`state.credentials`) and whose body or query it can read, with
the route's own function (`agent.record_events`, `agent.take_work`);
an exception is rendered by the app's handlers (`below.answer`).

Anything else goes on, untouched, to the route: an unknown credential
(checked in the database there), a body that is not JSON or does not
validate (handed on as it came, so the route's 422 names the fault), a
query the route has to judge. tests/integration/test_fast_agent.py holds
the two ways to the same replies.
"""

from __future__ import annotations

import math

from fastapi import Request
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from schedulearn.protocol import EventBatch
from schedulearn.server.api import agent
from schedulearn.server.api.below import (
    answer,
    app_state,
    bearer_token,
    is_json,
    read_body,
    replay,
)
from schedulearn.server.auth import hash_token
from schedulearn.server.services.enrollment import AgentIdentity
from schedulearn.server.state import AppState


class FastAgent:
    """ASGI middleware: serve a known agent's event batches and work polls directly."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The routes themselves: their paths are the ones served here, and
        # routing would have put them in the scope, where the protocol check
        # reads their reply models.
        routes = {r.endpoint: r for r in agent.router.routes if isinstance(r, APIRoute)}
        self.events = routes[agent.events]
        self.work = routes[agent.work]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            method, path = scope["method"], scope["path"]
            if method == "POST" and path == self.events.path:
                await self._events(scope, receive, send)
                return
            if method == "GET" and path == self.work.path:
                await self._work(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _events(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        state = app_state(scope)
        who = _known_agent(state, request.headers.get("authorization"))
        if who is None or not is_json(request.headers.get("content-type")):
            await self.app(scope, receive, send)  # the route answers (and refuses)
            return
        body = await read_body(request)
        if body is None:
            return  # the agent went away
        try:
            batch = EventBatch.model_validate_json(body)
        except ValidationError:
            await self.app(scope, replay(body, receive), send)  # the route's 422
            return
        scope["route"] = self.events
        await answer(scope, receive, send, request, lambda: agent.record_events(state, who, batch))

    async def _work(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        state = app_state(scope)
        who = _known_agent(state, request.headers.get("authorization"))
        query = _work_query(request)
        if who is None or query is None:
            await self.app(scope, receive, send)
            return
        node, wait = query
        scope["route"] = self.work
        await answer(
            scope,
            receive,
            send,
            request,
            lambda: agent.take_work(state, who, node, wait, request.is_disconnected),
        )


def _known_agent(state: AppState, authorization: str | None) -> AgentIdentity | None:
    """The node a credential stands for, if this replica's cache holds it;
    None sends the request on to the route, which checks it."""
    token = bearer_token(authorization)
    if token is None:
        return None
    return state.credentials.get(hash_token(token), state.clock.now())


def _work_query(request: Request) -> tuple[str, float] | None:
    """`node` and `wait` of a work poll whose query is plainly right; None
    leaves the query to the route, which says what is wrong with it."""
    params = request.query_params
    nodes, waits = params.getlist("node"), params.getlist("wait")
    if len(nodes) != 1 or not 1 <= len(nodes[0]) <= agent.NODE_NAME_MAX or len(waits) > 1:
        return None
    if not waits:
        return nodes[0], 0.0
    text = waits[0]
    # Plain decimals only: anything else (an exponent, "nan", "1_0") is the route's to judge.
    if not text or not text.replace(".", "", 1).isdigit() or not text.isascii():
        return None
    wait = float(text)
    if not (math.isfinite(wait) and agent.MIN_WAIT <= wait <= agent.MAX_WAIT):
        return None
    return nodes[0], wait
