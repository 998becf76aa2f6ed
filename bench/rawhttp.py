"""A lean HTTP/1.1 load generator for the benchmarks: keep-alive connections
over plain asyncio streams, one request in flight per connection.

Why not httpx: on a 2-core machine the client shares the CPUs with the
server and the agents, and httpx spends about as much CPU per request as
the server does, so it caps what a benchmark can measure. This client
builds each request once and parses only the status line, Content-Length
and body, which costs a few tens of microseconds per request. Like the
CLI, it sends this release's protocol version: a call without one is taken
as protocol 1, whose replies the server rewrites for older clients.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION


class HttpError(RuntimeError):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:300]!r}")
        self.status = status


class Connection:
    """One keep-alive connection to the server; reconnects when it is dropped."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.token = token
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    def request_bytes(self, method: str, path: str, body: Any = None) -> bytes:
        payload = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {self.token}\r\n{PROTOCOL_HEADER}: {PROTOCOL_VERSION}\r\n"
            f"Content-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        return head.encode() + payload

    async def send(self, request: bytes) -> tuple[int, bytes]:
        """Send a prepared request; resend once on a connection the server closed."""
        for attempt in (1, 2):
            try:
                if self._writer is None:
                    self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
                assert self._reader is not None
                self._writer.write(request)
                return await self._read_response(self._reader)
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def json(self, method: str, path: str, body: Any = None) -> Any:
        status, data = await self.send(self.request_bytes(method, path, body))
        if status >= 400:
            raise HttpError(status, data)
        return json.loads(data)

    @staticmethod
    async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await reader.readexactly(length)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
