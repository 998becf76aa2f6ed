"""`POST /api/v1/jobs` has two ways through the server: `FastSubmit` for a
caller the token cache knows, the FastAPI route for the rest. These tests
pin which requests each takes and that a client cannot tell them apart:
every kind of submission gets the same reply both ways."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from server_api import ADMIN, AGENT, Api

from schedulearn.protocol import PROTOCOL_HEADER
from schedulearn.server.api.fast_submit import FastSubmit
from schedulearn.server.services.idempotency import MAX_KEY_LENGTH

SPEC = {"command": ["true"], "gpus": 1}
JOBS = "/api/v1/jobs"


def _register(api: Api) -> None:
    reply = api.post(
        "/api/v1/agent/register", headers=api.agent, json={"name": "n1", "gpus": [{"index": 0}]}
    )
    assert reply.status_code == 200, reply.text


def test_a_cached_caller_is_served_by_the_fast_path_and_every_other_goes_to_the_route(
    api: Api,
) -> None:
    _register(api)
    assert api.post("/api/v1/jobs", json=SPEC).status_code == 201  # the admin token, now cached
    routed: list[str] = []

    async def route(scope: Any, receive: Any, send: Any) -> None:
        routed.append(f"{scope['method']} {dict(scope['headers']).get(b'authorization')!r}")
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    fast = FastSubmit(route)
    body = json.dumps(SPEC).encode()
    admin = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}

    assert api.call_asgi(fast, "POST", JOBS, admin, body)[0] == 201
    assert routed == []  # answered without the route, and the job exists
    assert api.get("/api/v1/jobs").json()["total"] == 2

    # Each of these is the route's to answer (and, but for the first, to refuse).
    long_key = {**admin, "Idempotency-Key": "k" * (MAX_KEY_LENGTH + 1)}
    for method, headers in [
        ("GET", admin),
        ("POST", {"Authorization": f"Bearer {AGENT}"}),  # an agent's token
        ("POST", {"Authorization": "Bearer not-a-token"}),
        ("POST", {"Authorization": f"Basic {ADMIN}"}),
        ("POST", {}),
        ("POST", long_key),
        ("POST", {**admin, "Idempotency-Key": ""}),
    ]:
        assert api.call_asgi(fast, method, JOBS, headers, body)[0] == 299, (method, headers)
    assert len(routed) == 7

    api.state.tokens.forget()  # as a revocation does: the next check is the database's
    assert api.call_asgi(fast, "POST", JOBS, admin, body)[0] == 299
    assert len(routed) == 8


# Each case: (request body, extra headers) from a tag that keeps the two
# sends of a case apart (the idempotency keys must differ).
Case = Callable[[str], tuple[bytes | str, dict[str, str]]]

CASES: dict[str, Case] = {
    "json": lambda _: (json.dumps({**SPEC, "name": "a", "env": {"A": "1"}}), {}),
    "yaml": lambda _: ("command: [echo, hi]\nname: y\n", {"Content-Type": "application/yaml"}),
    "array": lambda _: (json.dumps({"command": ["true"], "count": 3}), {}),
    "key repeated": lambda tag: (json.dumps(SPEC), {"Idempotency-Key": f"again-{tag}"}),
    "key repeated with another spec": lambda tag: (
        json.dumps({**SPEC, "name": "other"}),
        {"Idempotency-Key": f"taken-{tag}"},
    ),
    "missing command": lambda _: (json.dumps({"gpus": 1}), {}),
    "unknown field": lambda _: (json.dumps({**SPEC, "bogus": 1}), {}),
    "not json": lambda _: ("{nope", {}),
    "not a mapping": lambda _: ("[1, 2]", {}),
    "more GPUs than any node": lambda _: (json.dumps({**SPEC, "gpus": 64}), {}),
    "over the body limit": lambda _: (json.dumps({**SPEC, "name": "x" * 2_000_000}), {}),
    "protocol 1 client": lambda _: (json.dumps(SPEC), {PROTOCOL_HEADER: "1"}),
    "protocol from the future": lambda _: (json.dumps(SPEC), {PROTOCOL_HEADER: "999"}),
}


def _normal(value: Any, tag: str, key: str = "") -> Any:
    """A reply with what differs between two equal submissions masked: ids,
    times and the case's tag in a message."""
    if isinstance(value, dict):
        return {k: _normal(v, tag, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v, tag, key) for v in value]
    if value is not None and (key in ("id", "ids", "array_id") or key.endswith("_at")):
        return "<varies>"
    return value.replace(tag, "<tag>") if isinstance(value, str) else value


@pytest.mark.parametrize("case", list(CASES))
def test_the_fast_path_replies_as_the_route_does(api: Api, case: str) -> None:
    _register(api)
    # A job on the node's one GPU: no agent runs it, so it holds the GPU and
    # every job the cases submit stays pending (a reply shows a job's state).
    blocker = api.post("/api/v1/jobs", json=SPEC).json()["ids"][0]
    api.settle()
    assert api.get(f"/api/v1/jobs/{blocker}").json()["state"] == "assigned"
    state = api.state
    replies = []
    for tag in ("route", "fast"):
        body, extra = CASES[case](tag)
        if "Idempotency-Key" in extra:  # the key's first use
            api.post("/api/v1/jobs", headers={**api.admin, **extra}, json=SPEC)
        if tag == "route":
            state.tokens.forget()
        else:
            assert api.get("/api/v1/jobs").status_code == 200  # checks the token, and keeps it
            _, known = state.tokens.cached(ADMIN, state.clock.now())
            assert known is not None
        reply = api.post(
            "/api/v1/jobs",
            headers={**api.admin, "Content-Type": "application/json", **extra},
            content=body,
        )
        replies.append(
            (reply.status_code, reply.headers.get("content-type"), _normal(reply.json(), tag))
        )
    route, fast = replies
    assert fast == route
