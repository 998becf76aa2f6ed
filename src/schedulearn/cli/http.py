"""The CLI's HTTP transport: the standard library's `http.client`, one
keep-alive connection per `Http`.

Why not httpx: importing it costs the CLI 0.15-0.4 s (its own command-line
tool pulls in pygments and rich), more than the rest of a `schedulearn jobs`
call. The CLI needs little: JSON requests with query parameters, a
streamed reply read line by line (server-sent events), and telling a
request that never left (connection refused) from one that may have.

An `Http` may be given several addresses (server replicas on one
database): requests go to the one that last worked (`failover.Rotation`);
the caller, which knows whether a request may be repeated, calls `failed`
to move to the next one, and backs off once all have failed in a row.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode, urlsplit

from schedulearn.failover import PREFER_HEADER, Rotation, ServerListError, parse_servers

# A server that has not taken the connection by then is taken as not there: an
# address that drops packets (a host that is down) fails as fast as a closed
# port, and with it the whole command (issue 35: at most 2 s with no server).
# A reply, once the connection is made, is waited for as long as the caller says.
CONNECT_SECONDS = 1.5


class TransportError(Exception):
    """The server could not be reached, or the connection broke.

    `unsent` is True when the request certainly never reached the server
    (the connection was refused or timed out being made)."""

    def __init__(self, message: str, unsent: bool) -> None:
        super().__init__(message)
        self.unsent = unsent


class Response:
    """A finished reply: status, headers (lower-case names), body."""

    def __init__(self, status_code: int, headers: Mapping[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class StreamedResponse:
    """A reply being read: status and headers now, the body line by line."""

    def __init__(self, raw: http.client.HTTPResponse) -> None:
        self._raw = raw
        self.status_code = raw.status
        self.headers = {k.lower(): v for k, v in raw.getheaders()}

    def read(self) -> Response:
        return Response(self.status_code, self.headers, self._raw.read())

    def iter_bytes(self, size: int) -> Iterator[bytes]:
        while True:
            try:
                chunk = self._raw.read(size)
            except (OSError, http.client.HTTPException) as exc:
                raise TransportError(str(exc) or type(exc).__name__, unsent=False) from None
            if not chunk:
                return
            yield chunk

    def iter_lines(self) -> Iterator[str]:
        while True:
            try:
                line = self._raw.readline()
            except (OSError, http.client.HTTPException) as exc:
                raise TransportError(str(exc) or type(exc).__name__, unsent=False) from None
            if not line:
                return
            yield line.decode("utf-8", "replace").rstrip("\r\n")


class _Address:
    """One server address, split for `http.client`."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"server URL {base_url!r} must look like http://host:port")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")


class Http:
    """Requests to a server (`base_url`: one address, a comma-separated list, or
    a sequence of them) with the same headers on each."""

    def __init__(
        self, base_url: str | Sequence[str], headers: Mapping[str, str], timeout: float
    ) -> None:
        try:
            urls = parse_servers(base_url)
        except ServerListError as exc:
            raise ValueError(str(exc)) from None
        self._addresses = {url: _Address(url) for url in urls}
        self.rotation = Rotation(urls)
        self.headers = dict(headers)
        if len(urls) > 1:
            self.headers.setdefault(*PREFER_HEADER)
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    @property
    def _address(self) -> _Address:
        return self._addresses[self.rotation.current]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def failed(self) -> bool:
        """The current address failed: use the next one from now on. True when
        every address has failed in a row (the caller backs off before the next)."""
        self.close()
        return self.rotation.failed()

    def succeeded(self) -> None:
        """The current address answered: keep using it."""
        self.rotation.succeeded()

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        """A connection made within CONNECT_SECONDS, then reading with `timeout`."""
        address = self._address
        cls = http.client.HTTPSConnection if address.https else http.client.HTTPConnection
        conn = cls(address.host, address.port, timeout=CONNECT_SECONDS)
        try:
            conn.connect()
        except OSError as exc:
            conn.close()
            raise TransportError(str(exc) or type(exc).__name__, unsent=True) from None
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _url(self, path: str, params: Mapping[str, Any] | None) -> str:
        url = self._address.prefix + path
        if params:
            query = {
                k: ("true" if v is True else "false" if v is False else v)
                for k, v in params.items()
            }
            url += "?" + urlencode(query, doseq=True)
        return url

    def _send(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        url: str,
        body: bytes | None,
        headers: dict[str, str],
    ) -> http.client.HTTPResponse:
        conn.request(method, url, body=body, headers=headers)
        return conn.getresponse()

    def _prepare(
        self, json_body: Any, content: bytes | None, headers: Mapping[str, str] | None
    ) -> tuple[bytes | None, dict[str, str]]:
        merged = {**self.headers, **(headers or {})}
        body = content
        if json_body is not None:
            body = json.dumps(json_body).encode()
            merged.setdefault("content-type", "application/json")
        return body, merged

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        body, merged = self._prepare(json, content, headers)
        url = self._url(path, params)
        reused = self._conn is not None
        conn = self._conn or self._connect(self.timeout)
        self._conn = None
        try:
            raw = self._send(conn, method, url, body, merged)
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            conn.close()
            if not reused:
                raise TransportError(str(exc) or type(exc).__name__, unsent=False) from None
            # The kept-alive connection had been closed by the server while idle:
            # the request never reached it; make a new connection once.
            conn = self._connect(self.timeout)
            try:
                raw = self._send(conn, method, url, body, merged)
            except (OSError, http.client.HTTPException) as again:
                conn.close()
                raise TransportError(str(again) or type(again).__name__, unsent=False) from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise TransportError(str(exc) or type(exc).__name__, unsent=False) from None
        try:
            data = raw.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise TransportError(str(exc) or type(exc).__name__, unsent=False) from None
        headers_out = {k.lower(): v for k, v in raw.getheaders()}
        if raw.will_close:
            conn.close()
        else:
            self._conn = conn
        return Response(raw.status, headers_out, data)

    @contextmanager
    def stream(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None
    ) -> Iterator[StreamedResponse]:
        """A reply read as it comes, on its own connection, with no read timeout.
        An address that refuses the connection is passed over for the next one."""
        conn = self._connect_any()
        try:
            _, merged = self._prepare(None, None, None)
            try:
                raw = self._send(conn, method, self._url(path, params), None, merged)
            except (OSError, http.client.HTTPException) as exc:
                raise TransportError(str(exc) or type(exc).__name__, unsent=False) from None
            yield StreamedResponse(raw)
        finally:
            conn.close()

    def _connect_any(self) -> http.client.HTTPConnection:
        """A connection to the first address, from the current one on, that takes one."""
        while True:
            try:
                conn = self._connect(None)
            except TransportError:
                if self.failed():
                    raise
                continue
            self.succeeded()
            return conn
