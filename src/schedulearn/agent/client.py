"""The agent's HTTP client for the server's agent API (`/api/v1/agent`).

One typed method per endpoint of the contract in `schedulearn.protocol`,
each call carrying the protocol version (`PROTOCOL_HEADER`), and
`until_acked`, how every report is sent: retried (`retry.Retry`) while the
server is unreachable or answers 5xx, and given up only when the server
refuses it for good (a 4xx: it will never accept it, so retrying would
only stall the reports queued behind it).

Errors are split the way the agent must react to them:
`ServerUnavailable` (retry later), `AuthRejected` (the credential is
unknown or revoked (401), or the node itself is refused (403 on a
node-level call): stop and tell the admin), `ProtocolRefused` (the server
does not speak this agent's protocol version: stop and say which to
upgrade), `Rejected` (this request will never succeed; a 403 about one
job's report is one of these: that report is dropped, the agent goes on).

Before its first call the client asks the server which protocol versions
it speaks (`protocol_calls`' probe). An older server gets each call at its
own newest version, without the report fields it does not know (logged
once each); a call it does not know at all raises `ProtocolRefused`
naming its version. A server that answers a refusal with another range
than the one probed (it was downgraded or upgraded meanwhile) is probed
again, and the call retried.

`join` exchanges a one-time join token for the node's credential, which
`set_token` then puts on every later call.

The server may be several replicas on one database (`server` is then a
comma-separated list of addresses): each call goes to the address that
last answered (`failover.Rotation`) and, when that one is unreachable or
answers 5xx, to the next one at once; only when every address has failed
does the call raise `ServerUnavailable`, so the caller's `Retry` backs off
once per round, not once per address. Every agent call may be repeated
(the server deduplicates reports), so moving to another replica is as
safe as the retry that was already there. The node's credential is in the
shared database, so every replica accepts it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from schedulearn.agent.http import httpx
from schedulearn.agent.keepalive import HttpFailure, KeepAliveClient, Reply, lean_for
from schedulearn.agent.retry import Retry, Temporary
from schedulearn.agent.speaking import Speaking
from schedulearn.failover import PREFER_HEADER, Rotation, parse_servers
from schedulearn.protocol import (
    AGENT_PREFIX,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    SERVER_PROTOCOL_HEADER,
    Ack,
    CheckpointRef,
    ErrorBody,
    EventAcks,
    EventBatch,
    Heartbeat,
    HeartbeatReply,
    JobEvent,
    LogBatch,
    NodeJoin,
    NodeJoined,
    NodeRegistration,
    ProgressBatch,
    RegistrationReply,
    WorkBatch,
)
from schedulearn.protocol_calls import PROBE_PATH, NotKnown, Peer, probe_range

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

_RETRYABLE_STATUS = {408, 425, 429}
# Calls about the node itself: a 403 there means this node is refused (stop);
# elsewhere it refuses one job's report.
_NODE_PATHS = {"/join", "/register", "/heartbeat", "/work"}


class ServerUnavailable(Temporary):
    """The server did not answer, or answered with a temporary error."""


class Rejected(Exception):
    """The server refused the request for good (a 4xx answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class AuthRejected(Rejected):
    """The server refused the agent's token."""


class ProtocolRefused(Rejected):
    """The server does not speak this agent's protocol version (the message names both)."""


class AgentClient:
    """Typed calls to a server (one address, or several replicas) with one agent token."""

    def __init__(
        self, server: str, token: str, timeout: float = 15.0, protocol: int = PROTOCOL_VERSION
    ) -> None:
        # `protocol` is this release's version; tests pass another to play an agent
        # of another release.
        self.rotation = Rotation(parse_servers(server))
        self.server = ",".join(self.rotation.addresses)
        headers = {"Authorization": f"Bearer {token}", PROTOCOL_HEADER: str(protocol)}
        if len(self.rotation.addresses) > 1:
            headers.update([PREFER_HEADER])  # a replica still starting answers 503 soon
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
        )
        # The JSON calls, where no proxy or TLS asks for httpx (`keepalive`);
        # judged once, as httpx reads the proxy settings once.
        self._lean = KeepAliveClient(headers, timeout)
        self._lean_bases = {a + AGENT_PREFIX for a in self.rotation.addresses if lean_for(a)}
        self._speaking = Speaking(protocol, (self._http.headers, self._lean.headers))

    async def peer(self) -> Peer:
        """What the server speaks (asked once, by `GET /api/v1/protocol`)."""
        if self._speaking.peer is not None:
            return self._speaking.peer

        async def probe(base: str) -> tuple[int, int]:
            url = base[: -len(AGENT_PREFIX)] + PROBE_PATH
            response = await self._send(base, "GET", url, None, None, None, None)
            header = response.headers.get(SERVER_PROTOCOL_HEADER.lower())
            if header is None and response.status_code in (502, 503, 504):
                raise ServerUnavailable(f"GET {PROBE_PATH}: HTTP {response.status_code}")
            return probe_range(response.status_code, header)

        return self._speaking.learn(*await self._failover(probe))

    async def _judged(
        self, method: str, path: str, params: dict[str, str] | None, body: BaseModel | None
    ) -> tuple[dict[str, str] | None, str | None]:
        """The query and JSON body of a call as the server's version takes them."""
        peer = await self.peer()
        if peer.newest >= peer.ours:
            return params, None if body is None else body.model_dump_json()
        data = None if body is None else body.model_dump(mode="json")
        try:
            return self._speaking.judged(peer, method, path, params, data)
        except NotKnown as exc:
            raise ProtocolRefused(400, str(exc)) from None

    async def _failover(self, attempt: Callable[[str], Awaitable[T]]) -> T:
        """`attempt(base_url)` on the current address, then on each next one while
        they are unavailable; `ServerUnavailable` once every address has failed."""
        for tried in range(1, len(self.rotation.addresses) + 1):
            base = self.rotation.current
            try:
                result = await attempt(base + AGENT_PREFIX)
            except ServerUnavailable as exc:
                self.rotation.failed(base)
                if tried == len(self.rotation.addresses):
                    raise
                log.debug("server %s unavailable (%s); trying %s", base, exc, self.rotation.current)
                continue
            except Rejected:
                self.rotation.succeeded()  # it answered, if only to refuse
                raise
            if tried > 1:
                log.info("server unavailable; went on to %s", base)
            self.rotation.succeeded()
            return result
        raise AssertionError("unreachable: the loop returns or raises")

    async def close(self) -> None:
        await self._lean.aclose()
        await self._http.aclose()

    def set_token(self, token: str) -> None:
        for headers in (self._http.headers, self._lean.headers):
            headers["Authorization"] = f"Bearer {token}"

    async def join(self, join_token: str) -> NodeJoined:
        """Exchange a join token for the node's credential (the token is the only proof)."""
        for headers in (self._http.headers, self._lean.headers):
            headers.pop("Authorization", None)
        return await self._call("POST", "/join", NodeJoined, NodeJoin(join_token=join_token))

    async def register(self, body: NodeRegistration) -> RegistrationReply:
        return await self._call("POST", "/register", RegistrationReply, body)

    async def heartbeat(self, body: Heartbeat) -> HeartbeatReply:
        return await self._call("POST", "/heartbeat", HeartbeatReply, body)

    async def work(self, node: str, wait: float) -> WorkBatch:
        # The long poll may legitimately take `wait` seconds; allow for it.
        return await self._call(
            "GET",
            "/work",
            WorkBatch,
            params={"node": node, "wait": f"{wait:g}"},
            timeout=wait + 15.0,
        )

    async def event(self, job_id: int, body: JobEvent) -> Ack:
        return await self._call("POST", f"/jobs/{job_id}/events", Ack, body)

    async def events(self, body: EventBatch) -> EventAcks:
        return await self._call("POST", "/events", EventAcks, body)

    async def logs(self, job_id: int, body: LogBatch) -> Ack:
        return await self._call("POST", f"/jobs/{job_id}/logs", Ack, body)

    async def progress(self, job_id: int, body: ProgressBatch) -> Ack:
        return await self._call("POST", f"/jobs/{job_id}/progress", Ack, body)

    async def put_checkpoint(
        self, job_id: int, attempt: int, node: str, path: Path, sha256: str, size: int
    ) -> CheckpointRef:
        """Stream a packed checkpoint to the server."""
        url, headers = f"/jobs/{job_id}/checkpoint", {"X-Checkpoint-Sha256": sha256}
        headers["Content-Type"] = "application/x-tar"
        return await self._put_file(url, attempt, node, path, size, headers, CheckpointRef)

    async def put_full_log(
        self, job_id: int, attempt: int, node: str, path: Path, sha256: str, size: int
    ) -> Ack:
        """Stream an attempt's whole output spool (`agent.logspool`) to the server."""
        url, headers = f"/jobs/{job_id}/full-log", {"X-Log-Sha256": sha256}
        headers["Content-Type"] = "application/octet-stream"
        return await self._put_file(url, attempt, node, path, size, headers, Ack)

    async def _put_file(
        self,
        url: str,
        attempt: int,
        node: str,
        path: Path,
        size: int,
        headers: dict[str, str],
        reply: type[M],
    ) -> M:
        """PUT `path`'s bytes to `url`, streamed in 1 MiB chunks, for an attempt on `node`."""

        async def chunks() -> AsyncIterator[bytes]:
            with path.open("rb") as src:
                while chunk := src.read(1024 * 1024):
                    yield chunk

        params, _ = await self._judged("PUT", url, {"attempt": str(attempt), "node": node}, None)

        async def put(base: str) -> M:
            try:
                response = await self._http.put(
                    base + url,
                    content=chunks(),  # a fresh read of the file on each address
                    params=params,
                    headers={**headers, "Content-Length": str(size)},
                    timeout=httpx.Timeout(600.0, connect=15.0),
                )
            except httpx.HTTPError as exc:
                raise ServerUnavailable(f"PUT {url}: {exc!r}") from exc
            return self._reply(response, "PUT", url, reply)

        return await self._failover(put)

    async def get_checkpoint(self, job_id: int, dest: Path) -> str:
        """Download the job's checkpoint to `dest`; returns the sha256 of what arrived."""
        url = f"/jobs/{job_id}/checkpoint"
        await self._judged("GET", url, None, None)

        async def get(base: str) -> str:
            digest = hashlib.sha256()
            try:
                async with self._http.stream(
                    "GET", base + url, timeout=httpx.Timeout(600.0, connect=15.0)
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        self._reply(response, "GET", url, Ack)
                    with dest.open("wb") as out:  # from the start on each address
                        async for chunk in response.aiter_bytes(1024 * 1024):
                            digest.update(chunk)
                            out.write(chunk)
            except httpx.HTTPError as exc:
                raise ServerUnavailable(f"GET {url}: {exc!r}") from exc
            return digest.hexdigest()

        return await self._failover(get)

    def _reply(self, response: httpx.Response | Reply, method: str, path: str, reply: type[M]) -> M:
        status = response.status_code
        if status >= 500 or status in _RETRYABLE_STATUS:
            raise ServerUnavailable(f"{method} {path}: HTTP {status}")
        if status >= 400:
            message = _error_message(response)
            if status == 401 or (status == 403 and path in _NODE_PATHS):
                raise AuthRejected(status, message)
            # Names in lower case: httpx's headers and `Reply`'s both match that.
            refused = self._speaking.refused(
                status, response.headers.get(SERVER_PROTOCOL_HEADER.lower())
            )
            if refused is False:
                # The server changed since the probe: sent again at its version.
                raise ServerUnavailable(f"{method} {path}: the server's protocol changed")
            if refused:
                raise ProtocolRefused(status, message)
            raise Rejected(status, message)
        try:
            return reply.model_validate_json(response.content)
        except ValidationError as exc:
            # A server of another version: retrying will not help.
            raise Rejected(status, f"unexpected reply to {method} {path}: {exc}") from exc

    async def _call(
        self,
        method: str,
        path: str,
        reply: type[M],
        body: BaseModel | None = None,
        params: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> M:
        params, content = await self._judged(method, path, params, body)
        headers = None if body is None else {"Content-Type": "application/json"}

        async def send(base: str) -> M:
            response = await self._send(
                base, method, base + path, content, headers, params, timeout
            )
            return self._reply(response, method, path, reply)

        return await self._failover(send)

    async def _send(
        self,
        base: str,
        method: str,
        url: str,
        content: str | None,
        headers: dict[str, str] | None,
        params: dict[str, str] | None,
        timeout: float | None,
    ) -> httpx.Response | Reply:
        """One JSON request to `url` (on the address `base`), over the lean client
        where no proxy or TLS asks for httpx."""
        try:
            if base in self._lean_bases:
                return await self._lean.request(method, url, content, headers, params, timeout)
            return await self._http.request(
                method,
                url,
                content=content,
                headers=headers,
                params=params,
                timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
            )
        except (httpx.HTTPError, HttpFailure) as exc:
            path = url[len(base) - len(AGENT_PREFIX) :]
            raise ServerUnavailable(f"{method} {path}: {exc!r}") from exc


def _error_message(response: httpx.Response | Reply) -> str:
    try:
        body = ErrorBody.model_validate_json(response.content)
    except ValidationError:
        return response.text[:500]
    return body.error if body.detail is None else f"{body.error}: {body.detail}"


async def until_acked(call: Callable[[], Awaitable[T]], what: str) -> T | None:
    """Run `call` until the server answers; None if it refused the report for good.

    Retries forever while the server is unreachable: an exit report must not
    be lost. `AuthRejected` and `ProtocolRefused` propagate, since no retry
    can fix a bad token or an agent the server does not speak to.
    """
    try:
        return await Retry(f"send {what}").run(call)
    except (AuthRejected, ProtocolRefused):
        raise
    except Rejected as exc:
        log.warning("server refused %s for good: %s", what, exc)
        return None
