"""The HTTP connection's own limits, below the app: slow clients and `/healthz`.

uvicorn times out an idle keep-alive connection, but not a client that
sends its request slowly: 3,000 connections each sending a header byte now
and then, or 1,000 sending a body a byte at a time, were held open for ever
(issue 33). Two guards, both set up by `cli.serving`:

- `guarded_protocol(base, ...)` subclasses uvicorn's HTTP protocol: a
  connection has `header_seconds` to send a request's headers whole (from
  when it opens, and from the first byte of each next request); past that it
  gets 408 and is closed. It also answers a plain `GET /healthz` itself, as
  the bytes arrive, from `health()`: no task, no ASGI app, no database, so
  liveness does not queue behind a thousand requests the app is working on.
- `BodyDeadline` (ASGI) gives a request's body `body_seconds`, plus one
  second for every `min_rate` bytes received (Apache's mod_reqtimeout
  rule): a body slower than that gets 408 (connection closed), while a large
  upload at a reasonable speed is never cut.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_TIMEOUT_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)
_HEALTH = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
_HEALTH_REQUEST = (b"GET /healthz HTTP/1.1\r\n", b"GET /healthz HTTP/1.0\r\n")


def _error(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def guarded_protocol(
    base: type[asyncio.Protocol], header_seconds: float, health: Callable[[], dict[str, str]]
) -> type[asyncio.Protocol]:
    """`base` (uvicorn's httptools or h11 protocol) with a header deadline and a
    `/healthz` answered at the connection."""

    class Guarded(base):  # type: ignore[valid-type, misc]  # a class chosen at run time
        _header_timer: asyncio.TimerHandle | None = None
        _between = True  # no byte of a next request received yet

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _in_request(self) -> bool:
            cycle = self.cycle
            return cycle is not None and not cycle.response_complete

        def data_received(self, data: bytes) -> None:
            if self._between and not self._in_request() and self._health(data):
                return
            self._between = False
            if not self._in_request():
                self._arm()  # the headers of a new request are coming
            super().data_received(data)
            if self._in_request():
                self._disarm()  # headers complete: the body has its own deadline

        def _health(self, data: bytes) -> bool:
            # Only a whole, simple request in one read: anything else goes the usual way.
            if not data.startswith(_HEALTH_REQUEST) or not data.endswith(b"\r\n\r\n"):
                return False
            if data.count(b"\r\n\r\n") != 1 or b"content-length" in data.lower():
                return False
            body = json.dumps(health()).encode()
            self.transport.write(_HEALTH % (len(body), body))
            if b"connection: close" in data.lower() or data.startswith(_HEALTH_REQUEST[1]):
                self.transport.close()
                return True
            # Idle again, as after any response: uvicorn's keep-alive timer, not ours.
            self._disarm()
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )
            return True

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._between = True

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _too_slow(self) -> None:
            self._header_timer = None
            if self._in_request() or self.transport.is_closing():
                return
            body = _error(
                f"the request's headers did not arrive within {header_seconds:g} s; "
                "send the whole request at once"
            )
            self.transport.write(_TIMEOUT_408 % (len(body), body))
            self.transport.close()

    Guarded.__name__ = f"Guarded{base.__name__}"
    return Guarded


class _BodyTooSlow(BaseException):  # not Exception: no app handler turns it into a 500
    pass


class BodyDeadline:
    """ASGI: a request body must arrive within `body_seconds` + 1 s per `min_rate` bytes."""

    def __init__(self, app: ASGIApp, body_seconds: float, min_rate: int) -> None:
        self.app, self.body_seconds, self.min_rate = app, body_seconds, min_rate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started: float | None = None
        received = 0
        more = True
        responded = False

        async def timed() -> Message:
            nonlocal started, received, more
            if not more:
                return await receive()  # the body is in: wait for a disconnect as before
            now = time.monotonic()
            if started is None:
                started = now
            left = started + self.body_seconds + received / self.min_rate - now
            if left <= 0:
                raise _BodyTooSlow  # as wait_for with no time left: the read is not tried
            # `asyncio.timeout`, not `wait_for`: on Python 3.11 wait_for wraps each
            # read in a task of its own, a tenth of a submission's CPU on the server.
            try:
                async with asyncio.timeout(left):
                    message = await receive()
            except TimeoutError:
                raise _BodyTooSlow from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                more = bool(message.get("more_body", False))
            return message

        async def sending(message: Message) -> None:
            nonlocal responded
            responded = True
            await send(message)

        try:
            await self.app(scope, timed, sending)
        except _BodyTooSlow:
            if responded:
                raise
            body = _error(
                f"the request's body arrived too slowly ({received} bytes in "
                f"{time.monotonic() - (started or 0):.0f} s; at least {self.min_rate} "
                "bytes a second are expected)"
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 408,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})


# Never made to wait their turn: agents (their long-polls would hold turns,
# and a node's heartbeats and exits must not queue behind users' pages) and
# the probes of load balancers.
_UNGATED = ("/api/v1/agent/", "/healthz", "/readyz", "/metrics")


class ReadTurns:
    """ASGI: at most `limit` reads (GET, HEAD) are worked on at once; the rest wait
    their turn, costing the event loop nothing meanwhile.

    The app renders a reply on the event loop: a thousand job listings at
    once made iterations of the loop many seconds long (the database thread
    handed back results faster than the loop rendered them), and every other
    request, /healthz too, waited behind them (issue 33). A turn ends when
    the reply starts (a stream holds none for its life) or the request ends.
    Requests with a body are not gated: a slow body would hold a turn.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self._turns = asyncio.Semaphore(limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in ("GET", "HEAD")
            or scope["path"].startswith(_UNGATED)
        ):
            await self.app(scope, receive, send)
            return
        await self._turns.acquire()
        held = True

        async def sending(message: Message) -> None:
            nonlocal held
            if held and message["type"] == "http.response.start":
                held = False
                self._turns.release()
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if held:
                self._turns.release()
