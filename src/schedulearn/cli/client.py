"""A typed HTTP client for the user API, shared by the CLI commands and the tests.

Each method returns a `schedulearn.protocol` model, imported when the
method first runs; `whoami` and `job_rows` (what `schedulearn whoami` and
`jobs` read) return `cli.replies` dataclasses instead, so those commands
never load pydantic (issue 15: CLI start-up). Every call carries the
protocol version (`PROTOCOL_HEADER`). Before its first call a client asks
the server which versions it speaks (the probe of `protocol_calls`); to an
older server it speaks that server's newest version, for every call that
version knows, and refuses the others itself with a `ProtocolTooOld`
naming the server's version and what to upgrade. Errors become `ApiError`
with the server's own message (which says what to change).

A call the server could not take (503 with Retry-After: its database is
down or full, nothing was changed) is tried again with backoff for up to
`retry_seconds`. A server that cannot be reached (connection refused, or
not made within `http.CONNECT_SECONDS`) fails the call at once, naming the
address tried, when it is the only address (issue 35: a CLI command with
no server answering ends within 2 s, not 20). Given several addresses
(replicas), it goes to the next one at once, and backs off and tries the
list again for up to `retry_seconds` once every one has failed in a row:
one replica may be restarting while another takes over.
A call that may have reached the server before the connection broke is
tried again (on a replica list) only when repeating it is harmless: reads,
and submissions, which carry an `Idempotency-Key` (one per `submit`, the
same on every try) so the server returns the jobs of the first try.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from schedulearn.cli.http import Http, Response, TransportError
from schedulearn.cli.replies import Identity, JobRows

if TYPE_CHECKING:
    from schedulearn.protocol import (
        JobHistory,
        JobList,
        JobPublic,
        JobSpec,
        JobUpdate,
        JoinTokenPublic,
        LogLinePublic,
        LogPage,
        NodeList,
        NodePublic,
        NodeRemoved,
        PasswordSetReply,
        PolicyPreview,
        PolicyPublic,
        ProfileImport,
        ProfileImportReply,
        ProfileList,
        SubmitReply,
        TokenInfo,
        TokenList,
        TokenPublic,
        UserCreate,
        UserList,
        UserPublic,
        UserUpdate,
        WebLoginLink,
    )
    from schedulearn.protocol_calls import Peer

# The same as `schedulearn.protocol`'s (tests/unit/cli/test_replies.py checks):
# the wire models are imported by the methods that read them, not here, so
# that a command which reads none (`jobs`, `whoami`) never loads pydantic.
API_PREFIX = "/api/v1"
PROTOCOL_HEADER = "Schedulearn-Protocol"
PROTOCOL_VERSION = 5
SERVER_PROTOCOL_HEADER = "Schedulearn-Server-Protocol"

IDEMPOTENCY_HEADER = "Idempotency-Key"
T = TypeVar("T")
_SAFE_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


def new_key() -> str:
    """A fresh idempotency key: one per submission, reused by its retries."""
    return uuid.uuid4().hex


class _Backoff:
    """Exponential backoff with jitter (the agent's `retry.Backoff`, which
    would bring asyncio into every CLI start)."""

    def __init__(self, first: float, cap: float) -> None:
        self._next = first
        self._cap = cap

    def next_delay(self) -> float:
        delay = self._next * random.uniform(0.75, 1.25)
        self._next = min(self._next * 2, self._cap)
        return delay


def _retry_after(response: Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ProtocolTooOld(ApiError):
    """The server is older than this CLI and lacks what a call needs; nothing was sent."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


class Client:
    def __init__(
        self,
        server: str,
        token: str | None,
        timeout: float = 30.0,
        protocol: int = PROTOCOL_VERSION,
        retry_seconds: float = 20.0,
    ) -> None:
        # `protocol` is this release's version; tests pass another to play a client
        # of another release.
        headers = {PROTOCOL_HEADER: str(protocol)}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.retry_seconds = retry_seconds
        # `server` may list several replicas (comma-separated): see `cli.http`.
        self._http = Http(server, headers, timeout)
        self.server = ",".join(self._http.rotation.addresses)
        self._protocol = protocol
        self._peer: Peer | None = None  # what the server speaks, once probed

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def peer(self) -> Peer:
        """What the server speaks (asked once, by `GET /api/v1/protocol`)."""
        if self._peer is None:
            from schedulearn.protocol_calls import PROBE_PATH, Peer, probe_range

            response = self._send("GET", PROBE_PATH[len(API_PREFIX) :])
            header = response.headers.get(SERVER_PROTOCOL_HEADER.lower())
            if header is None and response.status_code in (502, 503, 504):
                # Unavailable (past the retries): what it speaks is still unknown.
                raise ApiError(response.status_code, _message(response))
            oldest, newest = probe_range(response.status_code, header)
            self._peer = Peer(oldest, newest, self._protocol, "CLI")
            if self._peer.speak != self._protocol and self._peer.refusal() is None:
                self._http.headers[PROTOCOL_HEADER] = str(self._peer.speak)
        return self._peer

    def _judged(self, method: str, path: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """`kwargs` of a call as the server's version takes them (`protocol_calls`)."""
        peer = self.peer()
        if peer.newest >= peer.ours:
            return kwargs
        from schedulearn.protocol_calls import NotKnown

        try:
            out = peer.outgoing(method, API_PREFIX + path, kwargs.get("params"), kwargs.get("json"))
        except NotKnown as exc:
            raise ProtocolTooOld(str(exc)) from None
        judged = dict(kwargs)
        if "params" in kwargs:
            judged["params"] = out.params
        if "json" in kwargs:
            judged["json"] = out.body
        return judged

    def _call(self, method: str, path: str, *, idempotent: bool = False, **kwargs: Any) -> Response:
        """One API call, judged against the server's version, then sent."""
        response = self._send(
            method, path, idempotent=idempotent, **self._judged(method, path, kwargs)
        )
        if response.status_code >= 400:
            raise ApiError(response.status_code, _message(response))
        return response

    def _send(self, method: str, path: str, *, idempotent: bool = False, **kwargs: Any) -> Response:
        """One request, tried again while the server is unavailable (see the module docstring)."""
        repeatable = idempotent or method in _SAFE_METHODS
        backoff = _Backoff(first=0.2, cap=5.0)
        deadline = time.monotonic() + self.retry_seconds
        while True:
            left = deadline - time.monotonic()
            try:
                response = self._http.request(method, API_PREFIX + path, **kwargs)
            except TransportError as exc:
                # `unsent`: refused or timed out connecting, the request never left.
                # One address: nothing to fail over to, so no retry (issue 35).
                if self.replicas and (exc.unsent or repeatable):
                    # The next address at once (each is tried even with no time
                    # left); a pause only after all of them failed in a row.
                    if not self._http.failed():
                        continue
                    if left > 0:
                        time.sleep(min(backoff.next_delay(), left))
                        continue
                raise ApiError(0, self._unreachable(exc)) from None
            unavailable = response.status_code == 503 or (
                response.status_code in (502, 504) and repeatable
            )
            if unavailable:
                if not self._http.failed():
                    continue
                if left > 0:
                    time.sleep(min(_retry_after(response) or backoff.next_delay(), left))
                    continue
            self._http.succeeded()
            return response

    @property
    def replicas(self) -> bool:
        """Whether several addresses were given (replicas to fail over between)."""
        return len(self._http.rotation.addresses) > 1

    def _unreachable(self, exc: TransportError) -> str:
        """What a call that reached no server says: the addresses tried, and what to do."""
        from schedulearn.cli import invocation

        tried = f"any of {self.server}" if self.replicas else self.server
        return (
            f"cannot reach the server at {tried} ({exc}); start one with "
            f"`{invocation.command()} up`, or pass --server / set SCHEDULEARN_SERVER"
        )

    def _reply(self, read: Callable[[object], T], method: str, path: str, **kwargs: Any) -> T:
        """One call's reply read by `read` (a `cli.replies` parser)."""
        response = self._call(method, path, **kwargs)
        try:
            return read(response.json())
        except ValueError as exc:  # not JSON, or not the reply expected (ReplyError)
            raise ApiError(
                response.status_code,
                f"the reply of {self.server} to {method} {path} is not what this "
                f"client understands ({exc}); are client and server the same release?",
            ) from None

    def submit(self, spec: JobSpec, key: str | None = None) -> SubmitReply:
        """Submit once: tries after a lost reply return the jobs of the first (`key`)."""
        from schedulearn.protocol import SubmitReply

        body = spec.model_dump(mode="json", exclude_defaults=True)
        headers = {IDEMPOTENCY_HEADER: key or new_key()}
        response = self._call("POST", "/jobs", json=body, headers=headers, idempotent=True)
        return SubmitReply.model_validate(response.json())

    def submit_yaml(self, text: str, key: str | None = None) -> SubmitReply:
        from schedulearn.protocol import SubmitReply

        headers = {"content-type": "application/yaml", IDEMPOTENCY_HEADER: key or new_key()}
        response = self._call(
            "POST", "/jobs", content=text.encode(), headers=headers, idempotent=True
        )
        return SubmitReply.model_validate(response.json())

    def jobs(
        self,
        states: list[str] | None = None,
        user: str | None = None,
        name: str | None = None,
        offset: int = 0,
        limit: int = 100,
        order: str = "desc",
        array: int | None = None,
    ) -> JobList:
        from schedulearn.protocol import JobList

        params = _job_filter(states, user, name, offset, limit, order, array)
        return JobList.model_validate(self._call("GET", "/jobs", params=params).json())

    def job_rows(
        self,
        states: list[str] | None = None,
        user: str | None = None,
        name: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> JobRows:
        """`jobs()` as `schedulearn jobs` lists it: the fields of a row, read
        without the wire models (`cli.replies`)."""
        params = _job_filter(states, user, name, offset, limit, "desc", None)
        return self._reply(JobRows.from_json, "GET", "/jobs", params=params)

    def job(self, job_id: int) -> JobPublic:
        from schedulearn.protocol import JobPublic

        return JobPublic.model_validate(self._call("GET", f"/jobs/{job_id}").json())

    def history(self, job_id: int) -> JobHistory:
        from schedulearn.protocol import JobHistory

        return JobHistory.model_validate(self._call("GET", f"/jobs/{job_id}/history").json())

    def cancel(self, job_id: int) -> JobPublic:
        from schedulearn.protocol import JobPublic

        return JobPublic.model_validate(self._call("POST", f"/jobs/{job_id}/cancel").json())

    def hold(self, job_id: int) -> JobPublic:
        from schedulearn.protocol import JobPublic

        return JobPublic.model_validate(self._call("POST", f"/jobs/{job_id}/hold").json())

    def release(self, job_id: int) -> JobPublic:
        from schedulearn.protocol import JobPublic

        return JobPublic.model_validate(self._call("POST", f"/jobs/{job_id}/release").json())

    def update(self, job_id: int, changes: JobUpdate) -> JobPublic:
        from schedulearn.protocol import JobPublic

        body = changes.model_dump(mode="json", exclude_none=True)
        return JobPublic.model_validate(self._call("PATCH", f"/jobs/{job_id}", json=body).json())

    def logs(self, job_id: int, after: int = 0, limit: int = 1000) -> LogPage:
        from schedulearn.protocol import LogPage

        params = {"after": after, "limit": limit}
        return LogPage.model_validate(
            self._call("GET", f"/jobs/{job_id}/logs", params=params).json()
        )

    def full_log(self, job_id: int) -> Iterator[bytes]:
        """The job's whole output as plain text, in chunks (`GET .../logs/full`)."""
        self._judged("GET", f"/jobs/{job_id}/logs/full", {})
        try:
            with self._http.stream("GET", f"{API_PREFIX}/jobs/{job_id}/logs/full") as response:
                if response.status_code >= 400:
                    raise ApiError(response.status_code, _message(response.read()))
                yield from response.iter_bytes(1 << 16)
        except TransportError as exc:
            raise ApiError(0, f"cannot reach the server at {self.server} ({exc})") from None

    def follow(self, job_id: int, after: int = 0) -> Iterator[LogLinePublic | JobPublic]:
        """Lines as they come (server-sent events), then the job as it ended."""
        from schedulearn.protocol import JobPublic, LogLinePublic

        params: dict[str, int | str] = {"after": after, "follow": "true"}
        params = self._judged("GET", f"/jobs/{job_id}/logs", {"params": params})["params"]
        try:
            with self._http.stream(
                "GET", f"{API_PREFIX}/jobs/{job_id}/logs", params=params
            ) as response:
                if response.status_code >= 400:
                    raise ApiError(response.status_code, _message(response.read()))
                event = ""
                for raw in response.iter_lines():
                    if raw.startswith("event:"):
                        event = raw[6:].strip()
                    elif raw.startswith("data:"):
                        data = raw[5:].strip()
                        if event == "end":
                            yield JobPublic.model_validate_json(data)
                            return
                        yield LogLinePublic.model_validate_json(data)
        except TransportError as exc:
            raise ApiError(0, f"lost the connection to {self.server} ({exc})") from None

    def nodes(self) -> NodeList:
        from schedulearn.protocol import NodeList

        return NodeList.model_validate(self._call("GET", "/nodes").json())

    def policy(self) -> PolicyPublic:
        from schedulearn.protocol import PolicyPublic

        return PolicyPublic.model_validate(self._call("GET", "/policy").json())

    def set_policy(self, spec: str) -> PolicyPublic:
        from schedulearn.protocol import PolicyPublic

        return PolicyPublic.model_validate(self._call("PUT", "/policy", json={"spec": spec}).json())

    def policy_preview(self, policies: str | None = None) -> PolicyPreview:
        from schedulearn.protocol import PolicyPreview

        params = {"policies": policies} if policies else {}
        response = self._call("GET", "/policy/preview", params=params)
        return PolicyPreview.model_validate(response.json())

    def profiles(self) -> ProfileList:
        from schedulearn.protocol import ProfileList

        return ProfileList.model_validate(self._call("GET", "/profiles").json())

    def import_profiles(self, body: ProfileImport) -> ProfileImportReply:
        from schedulearn.protocol import ProfileImportReply

        response = self._call("POST", "/profiles", json=body.model_dump(mode="json"))
        return ProfileImportReply.model_validate(response.json())

    def create_token(
        self,
        user: str | None = None,
        role: str = "user",
        name: str = "",
        expires: str | None = None,
    ) -> TokenPublic:
        from schedulearn.protocol import TokenCreate, TokenPublic

        # Validated like any body: a role outside the Literal is refused here.
        body = TokenCreate.model_validate(
            {"user": user, "role": role, "name": name, "expires": expires}
        )
        response = self._call("POST", "/tokens", json=body.model_dump(exclude_defaults=True))
        return TokenPublic.model_validate(response.json())

    def tokens(self, user: str | None = None, include_ended: bool = False) -> TokenList:
        from schedulearn.protocol import TokenList

        params: dict[str, Any] = {"all": include_ended}
        if user:
            params["user"] = user
        return TokenList.model_validate(self._call("GET", "/tokens", params=params).json())

    def revoke_token(self, token_id: int) -> TokenInfo:
        from schedulearn.protocol import TokenInfo

        return TokenInfo.model_validate(self._call("DELETE", f"/tokens/{token_id}").json())

    def users(self) -> UserList:
        from schedulearn.protocol import UserList

        return UserList.model_validate(self._call("GET", "/users").json())

    def add_user(self, body: UserCreate) -> UserPublic:
        from schedulearn.protocol import UserPublic

        response = self._call("POST", "/users", json=body.model_dump(exclude_defaults=True))
        return UserPublic.model_validate(response.json())

    def update_user(self, name: str, body: UserUpdate) -> UserPublic:
        from schedulearn.protocol import UserPublic

        response = self._call(
            "PATCH", f"/users/{name}", json=body.model_dump(exclude_defaults=True)
        )
        return UserPublic.model_validate(response.json())

    def set_password(self, name: str, password: str) -> PasswordSetReply:
        from schedulearn.protocol import PasswordSet, PasswordSetReply

        body = PasswordSet(password=password).model_dump()
        path = f"/users/{quote(name, safe='')}/password"
        return PasswordSetReply.model_validate(self._call("PUT", path, json=body).json())

    def web_login(self) -> WebLoginLink:
        from schedulearn.protocol import WebLoginLink

        return WebLoginLink.model_validate(self._call("POST", "/web-login").json())

    @property
    def address(self) -> str:
        """The server address that answered last (one of the replicas given)."""
        return self._http.rotation.current

    def add_node(self, name: str, expires_seconds: float) -> JoinTokenPublic:
        from schedulearn.protocol import JoinTokenPublic, NodeAdd

        body = NodeAdd(name=name, expires_seconds=expires_seconds).model_dump(mode="json")
        return JoinTokenPublic.model_validate(self._call("POST", "/nodes", json=body).json())

    def remove_node(self, name: str) -> NodeRemoved:
        from schedulearn.protocol import NodeRemoved

        path = f"/nodes/{quote(name, safe='')}"
        return NodeRemoved.model_validate(self._call("DELETE", path).json())

    def drain_node(self, name: str, reason: str = "") -> NodePublic:
        from schedulearn.protocol import NodePublic

        path = f"/nodes/{quote(name, safe='')}/drain"
        params = {"reason": reason} if reason else None
        return NodePublic.model_validate(self._call("POST", path, params=params).json())

    def resume_node(self, name: str) -> NodePublic:
        from schedulearn.protocol import NodePublic

        path = f"/nodes/{quote(name, safe='')}/resume"
        return NodePublic.model_validate(self._call("POST", path).json())

    def whoami(self) -> Identity:
        return self._reply(Identity.from_json, "GET", "/whoami")


def _job_filter(
    states: list[str] | None,
    user: str | None,
    name: str | None,
    offset: int,
    limit: int,
    order: str,
    array: int | None,
) -> dict[str, Any]:
    """The query of `GET /jobs`."""
    params: dict[str, Any] = {"offset": offset, "limit": limit, "order": order}
    if array is not None:
        params["array"] = array
    if states:
        params["state"] = states
    if user:
        params["user"] = user
    if name:
        params["name"] = name
    return params


def _message(response: Response) -> str:
    try:
        body = response.json()
    except (json.JSONDecodeError, ValueError):
        return f"HTTP {response.status_code}: {response.text[:500]}"
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return f"HTTP {response.status_code}: {body}"
