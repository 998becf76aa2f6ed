"""The protocol version check: every `/api/` call is judged before any route runs.

`ProtocolCheck` (ASGI middleware) reads the `Schedulearn-Protocol` header a
CLI or agent sends and answers 400, as an `ErrorBody` naming both versions,
to one this server does not speak (`protocol.protocol_refusal` holds the
rule). Every `/api/` reply, a refusal too, carries
`Schedulearn-Server-Protocol: <oldest>..<newest>` (`_announce`), so a
client learns what this server speaks, and tells a refusal from other
400s by the version it sent being outside it. A call without the header
is taken as protocol 1 (older clients, curl, browsers). Pages outside
`/api/` (the web UI, /healthz, /metrics) are not judged. `document` adds
the header to the OpenAPI schema of every `/api/` operation.

Replies to a client of an older protocol that cannot read them whole
(protocol 1 refuses unknown fields; 1 and 2 refuse nulls where a job's
details are hidden) are rewritten for it (`protocol_history.downgrade`):
JSON bodies by the route's response model, and the log stream's `line`
and `end` events. A JSON reply is buffered and rewritten only when its
model needs it; others pass untouched.

It owns no state.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schedulearn.protocol import (
    AGENT_PREFIX,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    SERVER_PROTOCOL_HEADER,
    UNVERSIONED_PROTOCOL,
    JobPublic,
    LogLinePublic,
    protocol_of,
    protocol_refusal,
    speaks,
)
from schedulearn.protocol_history import DOWNGRADED, downgrade, needs_downgrade

_JUDGED = "/api/"
_HEADER = PROTOCOL_HEADER.lower().encode()
_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


class ProtocolCheck:
    """ASGI middleware: refuse `/api/` calls of a protocol this server does not speak."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] == "http" and path.startswith(_JUDGED):
            header = next(
                (v.decode("latin-1") for k, v in scope.get("headers", ()) if k == _HEADER), None
            )
            caller = "agent" if path.startswith(AGENT_PREFIX) else "CLI"
            refusal = protocol_refusal(header, caller)
            if refusal is not None:
                await _refuse(send, refusal)
                return
            version = protocol_of(header)
            if version in DOWNGRADED:
                send = _Downgrade(scope, send, version)
            send = _announce(send)
        await self.app(scope, receive, send)


_SPEAKS_HEADER = (SERVER_PROTOCOL_HEADER.lower().encode(), speaks().encode())


def _announce(send: Send) -> Send:
    """`send` that adds the server's protocol range to the reply's headers."""

    async def announce(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), _SPEAKS_HEADER]}
        await send(message)

    return announce


# The events of the user API's log stream (`GET .../logs?follow=true`).
_EVENT_MODELS: dict[str, type[BaseModel]] = {"line": LogLinePublic, "end": JobPublic}


class _Downgrade:
    """`send` for a reply to an older client: leaves out the fields it does not know."""

    def __init__(self, scope: Scope, send: Send, version: int) -> None:
        self.scope = scope
        self.send = send
        self.version = version
        self.mode = "pass"
        self.start: Message | None = None
        self.model: type[BaseModel] | None = None
        self.body = bytearray()

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._choose(message)
            if self.mode != "json":
                await self.send(message)
            else:
                self.start = message
            return
        if message["type"] != "http.response.body" or self.mode == "pass":
            await self.send(message)
        elif self.mode == "json":
            self.body += message.get("body", b"")
            if not message.get("more_body", False):
                await self._send_json()
        else:
            body = self._events(message.get("body", b""))
            await self.send({**message, "body": body})

    def _choose(self, start: Message) -> None:
        content_type = MutableHeaders(raw=start["headers"]).get("content-type", "")
        if content_type.startswith("text/event-stream"):
            # Always rewritten: a stream's events are few, and its models are not
            # the route's response model.
            self.mode = "events"
            return
        route = self.scope.get("route")
        model = getattr(route, "response_model", None)
        if (
            start.get("status", 200) < 400
            and content_type.startswith("application/json")
            and isinstance(model, type)
            and issubclass(model, BaseModel)
            and needs_downgrade(model, self.version)
        ):
            self.mode = "json"
            self.model = model

    async def _send_json(self) -> None:
        assert self.start is not None and self.model is not None
        data = downgrade(self.model, json.loads(self.body), self.version)
        body = json.dumps(data, separators=(",", ":")).encode()
        headers = MutableHeaders(raw=list(self.start["headers"]))
        headers["content-length"] = str(len(body))
        await self.send({**self.start, "headers": headers.raw})
        await self.send({"type": "http.response.body", "body": body})

    def _events(self, chunk: bytes) -> bytes:
        # Each chunk the stream yields is whole events ("event: X\ndata: {...}\n\n").
        lines = chunk.decode().split("\n")
        event = ""
        for i, line in enumerate(lines):
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event in _EVENT_MODELS:
                data = downgrade(_EVENT_MODELS[event], json.loads(line[5:]), self.version)
                lines[i] = "data: " + json.dumps(data, separators=(",", ":"))
            elif not line:
                event = ""
        return "\n".join(lines).encode()


async def _refuse(send: Send, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (SERVER_PROTOCOL_HEADER.lower().encode(), speaks().encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def document(schema: dict[str, Any]) -> None:
    """Add the header (and its 400) to every `/api/` operation of an OpenAPI schema."""
    parameter = {
        "name": PROTOCOL_HEADER,
        "in": "header",
        "required": False,
        "schema": {"type": "integer"},
        "description": f"The protocol version the client speaks (this server: {speaks()}, "
        f"newest {PROTOCOL_VERSION}); absent means {UNVERSIONED_PROTOCOL}. A version the "
        "server does not speak is refused with a 400 naming both.",
    }
    refused = {
        "description": "Malformed request, or a protocol version this server does not speak",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    }
    for path, operations in schema.get("paths", {}).items():
        if not path.startswith(_JUDGED):
            continue
        for method, operation in operations.items():
            if method not in _METHODS:
                continue
            operation.setdefault("parameters", []).append(parameter)
            operation.setdefault("responses", {}).setdefault("400", refused)
