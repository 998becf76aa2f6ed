"""A lean HTTP/1.1 client for the agent's small JSON calls to the server.

Why not httpx for these: under `bench/api_load.py` its async stack
(httpcore, anyio, h11) was a fifth of a busy agent's CPU, about as much
per request as the server spent answering it. This client keeps plain
asyncio streams open between calls, writes each request in one piece, and
reads the status line, the headers and a `Content-Length` or chunked body,
which costs a small fraction of that.

It speaks plain `http://` only, and `AgentClient` uses it only where no
proxy is configured in the environment (`lean_for`): https (with httpx's
certificate handling), proxies, and streamed file transfers stay with
httpx.

A reply that did not arrive whole (refused or dropped connection, timeout,
malformed answer) raises `HttpFailure`. A request on a kept-alive
connection that the server had closed meanwhile is sent once more on a new
connection when nothing of its answer had arrived: every agent call may be
repeated (the server deduplicates reports).
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

# The most connections open to one server at a time (httpx's limit before).
MAX_CONNECTIONS = 32
# The most idle connections kept per server.
MAX_IDLE = 16
_READ_LIMIT = 1 << 20  # longest header line or chunk-size line accepted


class HttpFailure(Exception):
    """No whole answer: the connection failed, timed out, or the reply was malformed."""


@dataclass(frozen=True, slots=True)
class Reply:
    status_code: int
    headers: Mapping[str, str]  # names in lower case
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def lean_for(base_url: str) -> bool:
    """Whether calls to `base_url` may use this client: plain http, and no proxy
    in the environment (httpx honours one; this client does not)."""
    proxies = urllib.request.getproxies()
    return base_url.startswith("http://") and not ({"http", "all"} & proxies.keys())


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


class KeepAliveClient:
    """Requests over kept-alive connections; `headers` go with every request
    (a caller may change them between calls). `timeout` bounds a whole
    request, from waiting for a connection to the last byte of the reply."""

    def __init__(self, headers: Mapping[str, str], timeout: float) -> None:
        self.headers = dict(headers)
        self.timeout = timeout
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True  # a request still on the way closes its connection after
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()

    async def request(
        self,
        method: str,
        url: str,
        content: str | bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Reply:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"KeepAliveClient speaks plain http only, not {url!r}")
        key = (parts.hostname, parts.port or 80)
        query = "&".join(q for q in (parts.query, urlencode(params or {})) if q)
        target = (parts.path or "/") + (f"?{query}" if query else "")
        body = content.encode() if isinstance(content, str) else (content or b"")
        fields = {**self.headers, **(headers or {})}
        head = [f"{method} {target} HTTP/1.1", f"Host: {parts.netloc.rpartition('@')[2]}"]
        head += [f"{name}: {value}" for name, value in fields.items()]
        if body or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        try:
            async with self._slots, asyncio.timeout(self.timeout if timeout is None else timeout):
                return await self._exchange(key, data, method)
        except TimeoutError as exc:
            raise HttpFailure(f"no answer from {key[0]}:{key[1]} in time") from exc

    async def _exchange(self, key: tuple[str, int], data: bytes, method: str) -> Reply:
        while True:
            conn, reused = await self._take(key)
            answered = False
            done = False
            try:
                conn.writer.write(data)
                await conn.writer.drain()
                version, status, headers = await _read_head(conn.reader)
                answered = True
                content = await _read_body(conn.reader, status, headers, method)
                # A body read to the end of the connection leaves it at EOF.
                keep = _keeps_alive(version, headers) and not conn.reader.at_eof()
                done = True
            except (OSError, EOFError, asyncio.LimitOverrunError, ValueError) as exc:
                if reused and not answered:
                    continue  # the server closed it while idle: once more, on a new one
                raise HttpFailure(f"{method} to {key[0]}:{key[1]}: {exc!r}") from exc
            finally:
                if not done:
                    conn.close()  # mid-exchange (an error or a cancel): unusable
            if keep and not self._closed and len(idle := self._idle.setdefault(key, [])) < MAX_IDLE:
                idle.append(conn)
            else:
                conn.close()
            return Reply(status, headers, content)

    async def _take(self, key: tuple[str, int]) -> tuple[_Connection, bool]:
        idle = self._idle.get(key, [])
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn, True
            conn.close()
        try:
            reader, writer = await asyncio.open_connection(*key, limit=_READ_LIMIT)
        except OSError as exc:
            raise HttpFailure(f"cannot connect to {key[0]}:{key[1]}: {exc}") from exc
        return _Connection(reader, writer), False


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, int, dict[str, str]]:
    """The reply's HTTP version, status and headers (names in lower case)."""
    while True:
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        if not version.startswith("HTTP/1."):
            raise ValueError(f"not an HTTP/1 reply: {lines[0][:80]!r}")
        status = int(rest[:3])
        if 100 <= status < 200:
            continue  # an interim reply; the real one follows
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return version, status, headers


def _keeps_alive(version: str, headers: Mapping[str, str]) -> bool:
    connection = headers.get("connection", "").lower()
    return connection == "keep-alive" or (version == "HTTP/1.1" and connection != "close")


async def _read_body(
    reader: asyncio.StreamReader, status: int, headers: Mapping[str, str], method: str
) -> bytes:
    if method == "HEAD" or status in (204, 304):
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        while await reader.readuntil(b"\r\n") != b"\r\n":
            pass  # trailers
        return b"".join(chunks)
    if (length := headers.get("content-length")) is not None:
        return await reader.readexactly(int(length))
    return await reader.read()  # neither: the body runs to the end of the connection
