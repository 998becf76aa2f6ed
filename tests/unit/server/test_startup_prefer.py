"""`server.startup.Starting` while its app is still loading: a request with
`Prefer: wait=N` gets 503 with Retry-After after N seconds (so a client with
other replicas goes to one of them), a request without waits and is served
once the app is up. The app here is a real Starlette app whose build is held
on an event, driven through the ASGI interface as uvicorn drives it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import MutableMapping
from typing import Any

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from schedulearn.server.startup import Starting


async def _hello(_: object) -> PlainTextResponse:
    return PlainTextResponse("served")


async def _request(app: Starting, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """One GET through the ASGI app: its status, headers and body."""
    scope = {"type": "http", "method": "GET", "path": path, "headers": headers,
             "query_string": b"", "root_path": "", "scheme": "http", "http_version": "1.1",
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1)}  # fmt: skip
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return {"status": start["status"], "headers": dict(start["headers"]), "body": body}


def test_prefer_wait_gets_a_503_while_loading_and_no_preference_waits() -> None:
    release = threading.Event()

    def build() -> Starlette:
        release.wait(30)  # the app "loads" until the test lets it
        return Starlette(routes=[Route("/api/x", _hello)])

    app = Starting(build, {"status": "ok"})

    async def scenario() -> None:
        lifespan: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        await lifespan.put({"type": "lifespan.startup"})
        started = asyncio.Event()

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "lifespan.startup.complete":
                started.set()

        serving = asyncio.create_task(app({"type": "lifespan"}, lifespan.get, send))
        await started.wait()
        try:
            health = await _request(app, "/healthz", [])
            assert health["status"] == 200
            hurried = await _request(app, "/api/x", [(b"prefer", b"wait=0.2")])
            assert hurried["status"] == 503
            assert hurried["headers"][b"retry-after"] == b"1"
            assert "starting" in json.loads(hurried["body"])["error"]
            patient = asyncio.create_task(_request(app, "/api/x", []))
            await asyncio.sleep(0.3)
            assert not patient.done()  # held, not refused
            release.set()
            assert (await patient)["body"] == b"served"
            # Once loaded, a preference changes nothing.
            later = await _request(app, "/api/x", [(b"prefer", b"wait=0")])
            assert later["status"] == 200 and later["body"] == b"served"
        finally:
            release.set()
            await lifespan.put({"type": "lifespan.shutdown"})
            await asyncio.wait_for(serving, 30)

    asyncio.run(scenario())
