"""The protocol version check: every `/api/` call is judged before any route runs.

`ProtocolCheck` (ASGI middleware) reads the `Schedulearn-Protocol` header a
CLI or agent sends and answers 400, as an `ErrorBody` naming both versions,
to one this server does not speak (`protocol.protocol_refusal` holds the
rule); the refusal also carries `Schedulearn-Server-Protocol: <oldest>..<newest>`
so a client can tell it from other 400s. A call without the header is taken
as protocol 1 (older clients, curl, browsers). Pages outside `/api/` (the web
UI, /healthz, /metrics) are not judged. `document` adds the header to the
OpenAPI schema of every `/api/` operation.

It owns no state.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from schedulearn.protocol import (
    AGENT_PREFIX,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    SERVER_PROTOCOL_HEADER,
    UNVERSIONED_PROTOCOL,
    protocol_refusal,
    speaks,
)

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
        await self.app(scope, receive, send)


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
