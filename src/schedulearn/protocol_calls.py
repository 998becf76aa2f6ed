"""Which protocol version each call needs, and what a client may send an older server.

Every `/api/` call (method and path template, as in the checked-in wire
files) is declared here with the first protocol version that has it:
`SINCE` lists the calls added after protocol 1, and
`tests/unit/test_wire_schema.py` checks each entry (and each missing one)
against the files, so a call added without its version fails there.

A client (the CLI's `Client`, the agent's `AgentClient`) learns the
server's versions once, by the probe `GET /api/v1/protocol` (`probe_range`
reads its answer from any server: protocol 3 answers it, protocol 2
refuses the probe's version with its range in `SERVER_PROTOCOL_HEADER`,
and a server that sends no such header speaks protocol 1). `Peer` then
judges each call before it is sent, as SkyPilot's `minimal_api_version`
and Ray's version probe do:

- a server that speaks this client's version gets every call unchanged;
- an older one gets the client's call at the server's newest version (the
  header says so) when that version has the call; the query options and
  body fields it lacks are left out when they hold their default (the
  server would assume the same), and otherwise the call is refused here,
  naming the server's version and what to upgrade (`NotKnown`). An agent's
  reports are `lossy`: a field the server lacks is left out even when set,
  as that server's own agents never sent it;
- a server whose oldest version is newer than this client refuses it (the
  server's message says to upgrade the client).

Standard library only (the CLI imports it without pydantic); the wire
files are read only when the server is older than the client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from schedulearn import protocol_schema

PROBE_PATH = "/api/v1/protocol"

# The calls added after protocol 1, with the version that added them.
SINCE: dict[str, int] = {
    "DELETE /api/v1/nodes/{name}": 3,
    "DELETE /api/v1/queues/{name}": 3,
    "DELETE /api/v1/tokens/{token_id}": 3,
    "GET /api/v1/acct": 3,
    "GET /api/v1/jobs/{job_id}/logs/full": 3,
    "GET /api/v1/protocol": 3,
    "GET /api/v1/queues": 3,
    "GET /api/v1/queues/history": 3,
    "GET /api/v1/queues/{name}": 3,
    "GET /api/v1/tokens": 3,
    "GET /api/v1/usage": 3,
    "GET /api/v1/users": 3,
    "PATCH /api/v1/jobs/{job_id}": 3,
    "PATCH /api/v1/queues/{name}": 3,
    "PATCH /api/v1/users/{name}": 3,
    "POST /api/v1/agent/join": 3,
    "POST /api/v1/jobs/{job_id}/hold": 3,
    "POST /api/v1/jobs/{job_id}/release": 3,
    "POST /api/v1/nodes": 3,
    "POST /api/v1/nodes/{name}/drain": 3,
    "POST /api/v1/nodes/{name}/resume": 3,
    "POST /api/v1/queues": 3,
    "POST /api/v1/users": 3,
    "POST /api/v1/web-login": 3,
    "PUT /api/v1/agent/jobs/{job_id}/full-log": 3,
    "PUT /api/v1/users/{name}/password": 3,
}


def since(call: str) -> int:
    """The first protocol version that has `call` ("METHOD /path/{template}")."""
    return SINCE.get(call, 1)


def parse_range(value: str | None) -> tuple[int, int] | None:
    """`SERVER_PROTOCOL_HEADER`'s value ("1..3", or "3") as (oldest, newest)."""
    if not value:
        return None
    low, _, high = value.strip().partition("..")
    try:
        oldest, newest = int(low), int(high or low)
    except ValueError:
        return None
    return (oldest, newest) if 0 < oldest <= newest else None


def probe_range(status: int, header: str | None) -> tuple[int, int]:
    """The server's versions from its answer to the probe (`PROBE_PATH`)."""
    found = parse_range(header)
    if found is not None:
        return found
    # No header at all (0.1.0 answers a bare 404): a release before protocol 2,
    # which ignores the client's header. The caller has taken 502-504 for
    # "unavailable" before asking.
    return (1, 1)


class NotKnown(Exception):
    """The server is older than this client and lacks what this call needs."""


@dataclass(frozen=True)
class Outgoing:
    """A call as it is sent: its query and body, and what was left out of them."""

    params: dict[str, Any] | None
    body: Any
    left_out: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Peer:
    """What a client of protocol `ours` may send a server speaking `oldest..newest`."""

    oldest: int
    newest: int
    ours: int
    caller: str  # "CLI" or "agent", for messages

    @property
    def speak(self) -> int:
        """The version this client sends: its own, or the server's newest if older."""
        return min(self.ours, self.newest)

    @property
    def speaks(self) -> str:
        return str(self.newest) if self.oldest == self.newest else f"{self.oldest}..{self.newest}"

    def refusal(self) -> str | None:
        """Why this client cannot talk to the server at all (None when it can)."""
        if self.speak >= self.oldest:
            return None
        return (
            f"this {self.caller} speaks protocol {self.ours}, the server speaks {self.speaks}; "
            f"upgrade the {self.caller}"
        )

    def outgoing(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        body: Any = None,
        lossy: bool = False,
    ) -> Outgoing:
        """The call `method path` as this server may take it; `NotKnown` when it cannot."""
        if self.newest >= self.ours:
            return Outgoing(params, body)
        refused = self.refusal()
        if refused is not None:
            raise NotKnown(refused)
        ours = _wire(self.ours)
        call = _match(method, path, self.ours)
        if call is None:
            return Outgoing(params, body)  # not a call of ours: the server judges it
        need = since(call)
        if need > self.newest:
            raise NotKnown(
                f"the server speaks protocol {self.speaks} and does not know {call}, "
                f"which needs protocol {need} (this {self.caller} speaks {self.ours}); "
                f"upgrade the server to use it"
            )
        old = _wire(self.newest)
        judge = _Judge(self, call, ours["models"], old["models"], lossy)
        ours_call, old_call = ours["calls"][call], old["calls"].get(call, {})
        out_params = None if params is None else judge.params(params, ours_call, old_call)
        out_body = body
        if isinstance(body, dict):
            ours_body = ours_call.get("body", {}).get("content", {}).get("application/json", {})
            old_body = old_call.get("body", {}).get("content", {}).get("application/json", {})
            out_body = judge.value(body, ours_body, old_body, "")
        return Outgoing(out_params, out_body, judge.left_out)


class _Judge:
    """Walks one call's query and body against the server's version."""

    def __init__(
        self, peer: Peer, call: str, ours: dict[str, Any], old: dict[str, Any], lossy: bool
    ) -> None:
        self.peer = peer
        self.call = call
        self.ours = ours
        self.old = old
        self.lossy = lossy
        self.left_out: list[str] = []

    def params(
        self, params: dict[str, Any], ours: dict[str, Any], old: dict[str, Any]
    ) -> dict[str, Any]:
        known = old.get("params", {})
        out: dict[str, Any] = {}
        for name, value in params.items():
            key = f"query:{name}"
            if key in known:
                out[name] = value
                continue
            default = ours.get("params", {}).get(key, {}).get("schema", {}).get("default")
            self._lacking(f"the option {name!r} of {self.call}", value, default)
        return out

    def value(self, value: Any, ours: Any, old: Any, where: str) -> Any:
        ours, name = self._resolve(ours, self.ours)
        old, _ = self._resolve(old, self.old)
        if isinstance(value, dict) and "properties" in ours:
            return self._object(value, ours, old, name or where)
        if isinstance(value, dict) and isinstance(ours.get("additionalProperties"), dict):
            inner_old = old.get("additionalProperties", {})
            inner = ours["additionalProperties"]
            return {k: self.value(v, inner, inner_old, where) for k, v in value.items()}
        if isinstance(value, list) and "items" in ours:
            return [self.value(v, ours["items"], old.get("items", {}), where) for v in value]
        if "anyOf" in ours and isinstance(value, dict | list):
            return self._union(value, ours["anyOf"], old.get("anyOf", [old]), where)
        return value

    def _object(self, value: dict[str, Any], ours: Any, old: Any, model: str) -> dict[str, Any]:
        known = old.get("properties", {})
        out: dict[str, Any] = {}
        for key, item in value.items():
            mine = ours["properties"].get(key, {})
            if key in known:
                out[key] = self.value(item, mine, known[key], f"{model}.{key}")
            else:
                self._lacking(f"the field {model}.{key}", item, mine.get("default"))
        return out

    def _union(self, value: Any, ours: list[Any], old: list[Any], where: str) -> Any:
        # `X | None` and the like: the first branch of the value's kind, in both.
        kind = "object" if isinstance(value, dict) else "array"
        mine = next((b for b in ours if _kind(b, self.ours) == kind), None)
        theirs: Any = next((b for b in old if _kind(b, self.old) == kind), {})
        return value if mine is None else self.value(value, mine, theirs, where)

    def _resolve(self, schema: Any, models: dict[str, Any]) -> tuple[dict[str, Any], str]:
        name = ""
        while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
            name = schema["$ref"]
            schema = models.get(name, {})
        return (schema if isinstance(schema, dict) else {}), name

    def _lacking(self, what: str, value: Any, default: Any) -> None:
        """A part of the call the server's version lacks: left out, or refused."""
        # A query value is text ("30" for 30): compared as text too.
        same = value == default or (default is not None and str(value) == str(default))
        if value is None or value in ([], {}) or same:
            return  # the server assumes the same
        if self.lossy:
            self.left_out.append(what)
            return
        raise NotKnown(
            f"the server speaks protocol {self.peer.speaks} and does not know {what} "
            f"(this {self.peer.caller} speaks {self.peer.ours}); upgrade the server, "
            "or leave it out"
        )


def _kind(schema: Any, models: dict[str, Any]) -> str:
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        schema = models.get(schema["$ref"], {})
    if not isinstance(schema, dict):
        return ""
    if "properties" in schema or schema.get("type") == "object":
        return "object"
    return str(schema.get("type", ""))


@cache
def _wire(version: int) -> dict[str, Any]:
    """The checked-in wire of `version`, or the newest one when there is none
    (a test playing a client of a later release)."""
    found = protocol_schema.checked_in(version)
    while found is None and version > 1:
        version -= 1
        found = protocol_schema.checked_in(version)
    if found is None:
        raise NotKnown("no checked-in wire schema (schedulearn/wire/) in this installation")
    return found


@cache
def _patterns(version: int) -> list[tuple[str, str, re.Pattern[str], int]]:
    found = []
    for call in _wire(version)["calls"]:
        method, template = call.split(" ", 1)
        regex = re.sub(
            r"\\\{([^}:]+)(:path)?\\\}",
            lambda m: "(.+)" if m.group(2) else "([^/]+)",
            re.escape(template),
        )
        found.append((call, method, re.compile(regex + "$"), template.count("{")))
    # The most literal template first: /queues/history before /queues/{name}.
    found.sort(key=lambda entry: entry[3])
    return found


def _match(method: str, path: str, version: int) -> str | None:
    """The call (as the wire files name it) that `method path` is."""
    path = path.split("?", 1)[0]
    for call, call_method, pattern, _ in _patterns(version):
        if call_method == method.upper() and pattern.match(path):
            return call
    return None
