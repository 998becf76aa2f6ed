"""`agent.keepalive`, the agent's lean HTTP/1.1 client, against a real socket
server on 127.0.0.1 that answers each request with a scripted reply: what it
sends, the reply framings it reads, connection reuse, and which failures
become `HttpFailure` (and so a retry in `AgentClient`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from schedulearn.agent.keepalive import HttpFailure, KeepAliveClient, lean_for
from schedulearn.cli.freeports import free_port

# A reply script: (the request's head and body) -> the raw bytes to answer, or
# None to close the connection without answering. Bytes that end in CLOSE are
# sent without it, and the server then closes the connection.
Script = Callable[[bytes, bytes], bytes | None]
CLOSE = b"<close>"


def ok(body: bytes, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


class Server:
    """Counts connections and keeps each request it read."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.open: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                reply = self.script(head, body)
                if reply is None:
                    break
                writer.write(reply.removesuffix(CLOSE))
                await writer.drain()
                if reply.endswith(CLOSE):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def drop_idle(self) -> None:
        """Close every connection from the server's side (as an idle timeout does)."""
        for writer in self.open:
            writer.close()
        self.open.clear()


@asynccontextmanager
async def serving(script: Script) -> AsyncIterator[tuple[Server, str]]:
    server = Server(script)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        listener.close()
        server.drop_idle()


def test_a_request_carries_its_headers_body_and_query_and_the_connection_is_reused() -> None:
    async def go() -> None:
        async with serving(lambda head, body: ok(b'{"ok":true}')) as (server, url):
            client = KeepAliveClient({"Authorization": "Bearer t1", "X-P": "3"}, timeout=5)
            reply = await client.request(
                "POST",
                url + "/api/v1/agent/events",
                '{"events":[]}',
                {"Content-Type": "application/json"},
            )
            client.headers["Authorization"] = "Bearer t2"
            second = await client.request(
                "GET", url + "/api/v1/agent/work", params={"node": "n 1", "wait": "2"}
            )
            await client.aclose()
        assert reply.status_code == 200 and reply.content == b'{"ok":true}'
        assert second.text == '{"ok":true}'
        (head1, body1), (head2, body2) = server.requests
        assert head1.startswith(b"POST /api/v1/agent/events HTTP/1.1\r\n")
        assert b"\r\nHost: 127.0.0.1:" in head1 and b"\r\nX-P: 3\r\n" in head1
        assert b"\r\nAuthorization: Bearer t1\r\n" in head1
        assert b"\r\nContent-Type: application/json\r\n" in head1
        assert body1 == b'{"events":[]}'
        assert head2.startswith(b"GET /api/v1/agent/work?node=n+1&wait=2 HTTP/1.1\r\n")
        assert b"\r\nAuthorization: Bearer t2\r\n" in head2 and body2 == b""
        assert server.connections == 1  # kept alive between the two

    asyncio.run(go())


@pytest.mark.parametrize(
    ("raw", "content", "reused"),
    [
        (ok(b"abc", "X-Server-Protocol: 9\r\n"), b"abc", True),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nTrailer: x\r\n\r\n",
            b"abcdefg",
            True,
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"late"), b"late", True),
        (ok(b"bye", "Connection: close\r\n"), b"bye", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"hi", False),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
    ],
    ids=["length", "chunked", "interim", "close", "http1.0", "no-content"],
)
def test_reply_framings(raw: bytes, content: bytes, reused: bool) -> None:
    async def go() -> None:
        async with serving(lambda head, body: raw) as (server, url):
            client = KeepAliveClient({}, timeout=5)
            first = await client.request("GET", url + "/x")
            again = await client.request("GET", url + "/x")
            await client.aclose()
        assert first.content == again.content == content
        assert first.status_code in (200, 204)
        assert server.connections == (1 if reused else 2)

    asyncio.run(go())


def test_a_body_without_length_runs_to_the_end_of_the_connection() -> None:
    def script(head: bytes, body: bytes) -> bytes | None:
        if head.startswith(b"GET /x "):
            return b"HTTP/1.1 200 OK\r\n\r\nall of it"  # and more, until the close
        return ok(b"fine")

    async def go() -> None:
        async with serving(script) as (server, url):
            client = KeepAliveClient({}, timeout=5)
            task = asyncio.create_task(client.request("GET", url + "/x"))
            await asyncio.sleep(0.2)
            assert not task.done()
            server.drop_idle()  # the server ends the body by closing
            reply = await task
            assert (await client.request("GET", url + "/y")).content == b"fine"
            await client.aclose()
        assert reply.content == b"all of it" and server.connections == 2

    asyncio.run(go())


def test_a_connection_the_server_closed_while_idle_is_replaced_without_an_error() -> None:
    async def go() -> None:
        async with serving(lambda head, body: ok(b"fine")) as (server, url):
            client = KeepAliveClient({}, timeout=5)
            await client.request("POST", url + "/events", "{}")
            server.drop_idle()
            await asyncio.sleep(0.05)
            reply = await client.request("POST", url + "/events", "{}")
            await client.aclose()
        assert reply.content == b"fine" and server.connections == 2
        assert len(server.requests) == 2

    asyncio.run(go())


def test_a_request_answered_by_a_close_on_a_new_connection_fails() -> None:
    async def go() -> None:
        async with serving(lambda head, body: None) as (server, url):
            client = KeepAliveClient({}, timeout=5)
            with pytest.raises(HttpFailure, match=r"POST to 127\.0\.0\.1"):
                await client.request("POST", url + "/events", "{}")
            await client.aclose()
        assert server.connections == 1  # no second try on a fresh connection

    asyncio.run(go())


def test_failures_are_http_failures_and_leave_the_client_usable() -> None:
    short = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort" + CLOSE
    replies = iter([b"garbage\r\n\r\n", short])

    def script(head: bytes, body: bytes) -> bytes | None:
        if b"/slow" in head:
            return b""  # never answers in time
        return next(replies, ok(b"fine"))

    async def go() -> None:
        async with serving(script) as (_server, url):
            client = KeepAliveClient({}, timeout=5)
            with pytest.raises(HttpFailure, match="not an HTTP/1 reply"):
                await client.request("GET", url + "/x")
            with pytest.raises(HttpFailure, match="IncompleteReadError"):
                await client.request("GET", url + "/x")
            with pytest.raises(HttpFailure, match="in time"):
                await client.request("GET", url + "/slow", timeout=0.2)
            assert (await client.request("GET", url + "/x")).content == b"fine"
            await client.aclose()
        with pytest.raises(HttpFailure, match="cannot connect"):
            await KeepAliveClient({}, timeout=5).request("GET", f"http://127.0.0.1:{free_port()}/x")

    asyncio.run(go())


def test_lean_only_for_plain_http_without_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert lean_for("http://10.0.0.5:8000")
    assert not lean_for("https://server.example:8443")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert not lean_for("http://10.0.0.5:8000")


def test_the_agent_client_sends_over_it_unless_a_proxy_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a proxy the agent's calls reach the server in origin form over
    this client; with HTTP_PROXY set they go through the proxy (httpx), as
    before this client existed."""
    from schedulearn.agent.client import AgentClient, ServerUnavailable

    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    busy = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
    # The client's first call is its probe of the server's protocol versions.
    speaks = b"HTTP/1.1 200 OK\r\nSchedulearn-Server-Protocol: 1..3\r\nContent-Length: 0\r\n\r\n"

    def answer(head: bytes, body: bytes) -> bytes:
        return speaks if b"/api/v1/protocol " in head.split(b"\r\n")[0] else busy

    async def call(server: str) -> None:
        client = AgentClient(server, "agent-token")
        try:
            with pytest.raises(ServerUnavailable, match="HTTP 503"):
                await client.work("n1", wait=0)
        finally:
            await client.close()

    async def go() -> None:
        async with serving(answer) as (seen, url):
            await call(url)
            assert seen.requests[0][0].startswith(b"GET /api/v1/protocol HTTP/1.1\r\n")
            direct = seen.requests[1][0]
            assert direct.startswith(b"GET /api/v1/agent/work?node=n1&wait=0 HTTP/1.1\r\n")
            assert b"\r\nAuthorization: Bearer agent-token\r\n" in direct
            assert b"python-httpx" not in direct  # httpx names itself; this client does not
            monkeypatch.setenv("HTTP_PROXY", url)  # the scripted server plays the proxy
            nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens: the proxy answers
            await call(nowhere)
            assert seen.requests[2][0].startswith(f"GET {nowhere}/api/v1/protocol ".encode())
            proxied = seen.requests[3][0]
            assert proxied.startswith(f"GET {nowhere}/api/v1/agent/work?".encode())
            assert b"python-httpx" in proxied

    asyncio.run(go())
