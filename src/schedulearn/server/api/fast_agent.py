"""An agent's event batches and work polls answered without FastAPI's
per-request machinery.

An agent sends these two for every few jobs it runs: `POST
/api/v1/agent/events` (its jobs' starts and exits) and `GET
/api/v1/agent/work` (the long poll for starts and stops); and every
node sends `POST /api/v1/agent/heartbeat` every `heartbeat_seconds`,
which with a thousand nodes is the server's busiest route
(bench/scale.py). FastAPI's
routing, dependency solving and body validation were about 8% of the
server's samples under `bench/api_load.py` (py-spy). The third is `POST
/api/v1/agent/jobs/{job_id}/logs`, a batch of up to 10,000 lines of a
job's output: there, FastAPI's parsing and validation of the body were a
fifth of the server's CPU while a job printed without pause, and a body
is read straight into its model (`protocol.request_from_json`).
`FastAgent` sits in the app's middleware stack beside `fast_submit`
(below the protocol check and the body limit, which still judge every
request) and answers a request whose credential this replica's cache
holds (`state.credentials`) and whose body or query it can read, with
the route's own function (`agent.record_events`, `agent.take_work`,
`agent.record_heartbeat`);
an exception is rendered by the app's handlers (`below.answer`).

Anything else goes on, untouched, to the route: an unknown credential
(checked in the database there), a body that is not JSON or does not
validate (handed on as it came, so the route's 422 names the fault), a
query the route has to judge. tests/integration/test_fast_agent.py holds
the two ways to the same replies.
"""

from __future__ import annotations

import math
from typing import TypeVar

from fastapi import Request
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from schedulearn.protocol import EventBatch, Heartbeat, LogBatch, request_from_json
from schedulearn.server.api import agent
from schedulearn.server.api.below import (
    answer,
    app_state,
    bearer_token,
    is_json,
    read_body,
    replay,
)
from schedulearn.server.api.deps import JOB_ID_MAX
from schedulearn.server.auth import hash_token
from schedulearn.server.services.enrollment import AgentIdentity
from schedulearn.server.state import AppState

_Body = TypeVar("_Body", EventBatch, LogBatch, Heartbeat)


class FastAgent:
    """ASGI middleware: serve a known agent's event batches, work polls, log
    batches and heartbeats directly."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The routes themselves: their paths are the ones served here, and
        # routing would have put them in the scope, where the protocol check
        # reads their reply models.
        routes = {r.endpoint: r for r in agent.router.routes if isinstance(r, APIRoute)}
        self.events = routes[agent.events]
        self.work = routes[agent.work]
        self.logs = routes[agent.job_logs]
        self.heartbeat = routes[agent.heartbeat]
        self._logs_prefix, _, self._logs_suffix = self.logs.path.partition("{job_id}")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            method, path = scope["method"], scope["path"]
            if method == "POST" and path == self.events.path:
                await self._events(scope, receive, send)
                return
            if method == "GET" and path == self.work.path:
                await self._work(scope, receive, send)
                return
            if method == "POST" and path == self.heartbeat.path:
                await self._heartbeat(scope, receive, send)
                return
            if method == "POST" and path.startswith(self._logs_prefix):
                job_id = _job_id(path, self._logs_prefix, self._logs_suffix)
                if job_id is not None:
                    await self._logs(scope, receive, send, job_id)
                    return
        await self.app(scope, receive, send)

    async def _events(self, scope: Scope, receive: Receive, send: Send) -> None:
        read = await self._read(scope, receive, send, EventBatch)
        if read is not None:
            state, who, request, batch = read
            scope["route"] = self.events
            await answer(
                scope, receive, send, request, lambda: agent.record_events(state, who, batch)
            )

    async def _heartbeat(self, scope: Scope, receive: Receive, send: Send) -> None:
        read = await self._read(scope, receive, send, Heartbeat)
        if read is not None:
            state, who, request, beat = read
            scope["route"] = self.heartbeat
            await answer(
                scope, receive, send, request, lambda: agent.record_heartbeat(state, who, beat)
            )

    async def _logs(self, scope: Scope, receive: Receive, send: Send, job_id: int) -> None:
        read = await self._read(scope, receive, send, LogBatch)
        if read is not None:
            state, who, request, batch = read
            scope["route"] = self.logs
            scope["path_params"] = {"job_id": job_id}
            await answer(
                scope,
                receive,
                send,
                request,
                lambda: agent.record_logs(state, who, job_id, batch),
            )

    async def _read(
        self, scope: Scope, receive: Receive, send: Send, model: type[_Body]
    ) -> tuple[AppState, AgentIdentity, Request, _Body] | None:
        """A known agent's JSON body, validated; None when the request went on
        to the route instead (which answers, and refuses what is wrong)."""
        request = Request(scope, receive)
        state = app_state(scope)
        who = _known_agent(state, request.headers.get("authorization"))
        if who is None or not is_json(request.headers.get("content-type")):
            await self.app(scope, receive, send)
            return None
        body = await read_body(request)
        if body is None:
            return None  # the agent went away
        try:
            parsed = request_from_json(model, body)
        except ValidationError:
            await self.app(scope, replay(body, receive), send)  # the route's 422
            return None
        return state, who, request, parsed

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


def _job_id(path: str, prefix: str, suffix: str) -> int | None:
    """The job id in a log batch's path, when it is plainly one the route
    takes; None leaves the path to the route."""
    if not path.endswith(suffix):
        return None
    text = path[len(prefix) : len(path) - len(suffix)]
    if not (text.isascii() and text.isdigit() and len(text) <= 19):
        return None
    job_id = int(text)
    return job_id if 1 <= job_id <= JOB_ID_MAX else None


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
