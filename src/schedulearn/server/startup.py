"""Listen first, load later: `Starting`, the ASGI app a server process serves first.

Importing the server's dependencies (SQLAlchemy, FastAPI, pydantic) and
building the app takes seconds of CPU on a small machine, and a restarted
server used to answer nothing meanwhile (10-18 s on a loaded machine,
issue 14). `Starting` lets uvicorn listen at once: it imports and builds
the real app (`build`, in a worker thread) and runs its lifespan (migrations,
the scheduler) in the background. Meanwhile `/healthz` (liveness) answers
200, `/readyz` answers 503 with Retry-After, and every other request waits
until the app is ready and is then served by it, so a client that polled
/healthz and calls the API next simply waits a little. A client that would
rather go elsewhere (the agent and the CLI given several replicas) sends
`Prefer: wait=N` (RFC 7240): after N seconds it gets 503 with Retry-After
instead, and tries the next replica. If the app cannot
start, the process logs why and exits with status 3 (uvicorn's code for a
failed start-up).

It imports only the standard library, so nothing heavy is on the path to
listening. It owns the real app once built.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

log = logging.getLogger("schedulearn.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

FAILED_START_STATUS = 3


class Starting:
    """ASGI app: serve `build()`'s app once it is built and started; answer health meanwhile."""

    def __init__(
        self,
        build: Callable[[], Any],
        health: dict[str, str],
        health_of: Callable[[Any], dict[str, str]] | None = None,
    ) -> None:
        self._build = build
        self._health = health  # the /healthz body while starting
        self._health_of = health_of  # the body once the app (given) is up
        self._app: Any = None
        self._ready: asyncio.Event | None = None
        self._lifespan: contextlib.AbstractAsyncContextManager[Any] | None = None
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        if self._app is None:
            path = scope.get("path", "")
            if scope["type"] == "http" and path == "/healthz":
                await _json(send, 200, self._health)
                return
            if scope["type"] == "http" and path == "/readyz":
                await _json(send, 503, {"error": "the server is starting; try again shortly"}, 1)
                return
            assert self._ready is not None
            if not await self._wait_ready(_preferred_wait(scope)):
                await _json(send, 503, {"error": "the server is starting; try again shortly"}, 1)
                return
            if self._app is None:  # it failed; the process is exiting
                await _json(send, 503, {"error": "the server failed to start"}, 5)
                return
        await self._app(scope, receive, send)

    def health(self) -> dict[str, str]:
        """The /healthz body now: cheap, touches no database (`guard` answers with it)."""
        if self._app is None or self._health_of is None:
            return self._health
        return self._health_of(self._app)

    async def _wait_ready(self, limit: float | None) -> bool:
        """Wait for the app (at most `limit` seconds, if given); False if it is still loading."""
        assert self._ready is not None
        if limit is None:
            await self._ready.wait()
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), limit)
        return self._ready.is_set()

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        self._ready = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._start())
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        if self._task is not None:
            await self._task
        if self._lifespan is not None:
            await self._lifespan.__aexit__(None, None, None)
        await send({"type": "lifespan.shutdown.complete"})

    async def _start(self) -> None:
        assert self._ready is not None
        try:
            app = await asyncio.to_thread(self._build)
            lifespan = app.router.lifespan_context(app)
            await lifespan.__aenter__()
            self._lifespan = lifespan
            self._app = app
            # Everything made so far (modules, the app) lives as long as the
            # process: keep it out of the cyclic collector, whose full passes
            # over it held the GIL, and so every request, ~0.5 s at a time.
            gc.collect()
            gc.freeze()
        except Exception:
            log.exception("the server could not start")
            print("Application startup failed. Exiting.", file=sys.stderr, flush=True)
            logging.shutdown()
            os._exit(FAILED_START_STATUS)  # like uvicorn when a lifespan fails
        finally:
            self._ready.set()


def _preferred_wait(scope: Scope) -> float | None:
    """Seconds from a `Prefer: wait=N` request header (RFC 7240), if one was sent."""
    for name, value in scope.get("headers", ()):
        if name.lower() != b"prefer":
            continue
        for preference in value.decode("latin-1").split(","):
            key, _, number = preference.strip().partition("=")
            if key.strip().lower() == "wait":
                with contextlib.suppress(ValueError):
                    return max(0.0, float(number.strip().strip('"')))
    return None


async def _json(send: Send, status: int, body: dict[str, str], retry_after: int = 0) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if retry_after:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
