"""An agent's `POST /api/v1/agent/events`, `GET /api/v1/agent/work`,
`POST /api/v1/agent/jobs/{job_id}/logs` and `POST /api/v1/agent/heartbeat`
have two ways through the server:
`FastAgent` for a credential the cache knows, the FastAPI routes for the
rest. These tests pin which requests each takes and that an agent cannot
tell them apart: every kind of request gets the same reply both ways."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from server_api import Api

from schedulearn.protocol import PROTOCOL_HEADER
from schedulearn.server.api.fast_agent import FastAgent
from schedulearn.server.auth import hash_token

NODE = "n1"
EVENTS = "/api/v1/agent/events"
WORK = "/api/v1/agent/work"
LOGS = "/api/v1/agent/jobs/{}/logs"
HEARTBEAT = "/api/v1/agent/heartbeat"
SPEC = {"command": ["true"], "gpus": 1}


def _register(api: Api) -> dict[str, str]:
    """Node n1 with four GPUs; its credential, now in the cache."""
    headers = api.node(NODE)
    reply = api.post(
        "/api/v1/agent/register",
        headers=headers,
        json={"name": NODE, "gpus": [{"index": i} for i in range(4)]},
    )
    assert reply.status_code == 200, reply.text
    return headers


def _placed(api: Api) -> int:
    """A job the scheduler has placed on n1 (and no agent has taken yet)."""
    job = api.post("/api/v1/jobs", json=SPEC).json()["ids"][0]
    api.settle()
    assert api.get(f"/api/v1/jobs/{job}").json()["state"] == "assigned"
    return int(job)


def _event(job: int, kind: str = "started", **changes: Any) -> dict[str, Any]:
    return {"job_id": job, "attempt": 1, "node": NODE, "kind": kind, "at": 1.0, **changes}


def _batch(*events: dict[str, Any]) -> bytes:
    return json.dumps({"events": list(events)}).encode()


def _started(job: int, **changes: Any) -> bytes:
    return _batch(_event(job, **changes))


def _beat(*running: int, name: str = NODE, **changes: Any) -> bytes:
    jobs = [{"job_id": job, "attempt": 1} for job in running]
    gpus = [{"index": i, "utilization_pct": 50.0} for i in range(4)]
    return json.dumps({"name": name, "gpus": gpus, "running": jobs, **changes}).encode()


def _lines(*texts: str, attempt: int = 1) -> bytes:
    lines = [{"seq": i, "text": t, "at": 1.0} for i, t in enumerate(texts, 1)]
    return json.dumps({"attempt": attempt, "node": NODE, "lines": lines}).encode()


def test_a_known_agent_is_served_by_the_fast_path_and_every_other_goes_to_the_route(
    api: Api,
) -> None:
    headers = _register(api)
    job = _placed(api)
    routed: list[tuple[str, bytes]] = []

    async def route(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()  # what reached the route, body and all
        routed.append(
            (
                f"{scope['method']} {scope['path']}?{scope['query_string'].decode()}",
                message.get("body", b""),
            )
        )
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    fast = FastAgent(route)
    as_json = {**headers, "Content-Type": "application/json"}

    status, body = api.call_asgi(fast, "GET", f"{WORK}?node={NODE}&wait=0", headers)
    assert status == 200 and [s["job_id"] for s in json.loads(body)["starts"]] == [job]
    status, body = api.call_asgi(fast, "POST", EVENTS, as_json, _started(job))
    assert status == 200 and json.loads(body)["acks"][0]["ok"] is True
    status, body = api.call_asgi(fast, "POST", LOGS.format(job), as_json, _lines("hello"))
    assert status == 200 and json.loads(body)["ok"] is True
    status, body = api.call_asgi(fast, "POST", HEARTBEAT, as_json, _beat(job))
    assert status == 200 and json.loads(body)["reregister"] is False
    assert routed == []  # answered without the routes, and recorded
    assert api.state.samples[NODE][0].utilization_pct == 50.0
    assert api.get(f"/api/v1/jobs/{job}").json()["state"] == "running"
    logged = api.get(f"/api/v1/jobs/{job}/logs").json()["lines"]
    assert [line["text"] for line in logged] == ["hello"]

    # Each of these is the route's to answer (and to refuse).
    cases: list[tuple[str, str, dict[str, str], bytes]] = [
        ("GET", f"{WORK}?node={NODE}&wait=1e1", headers, b""),  # not a plain decimal
        ("GET", f"{WORK}?node={NODE}&wait=nan", headers, b""),
        ("GET", f"{WORK}?node={NODE}&wait=4000", headers, b""),  # over the bound
        ("GET", f"{WORK}?node={NODE}&wait=1&wait=2", headers, b""),
        ("GET", f"{WORK}?wait=0", headers, b""),  # no node
        ("GET", f"{WORK}?node={'x' * 201}", headers, b""),
        ("GET", f"{WORK}?node={NODE}", {"Authorization": "Bearer not-a-credential"}, b""),
        (
            "GET",
            f"{WORK}?node={NODE}",
            {"Authorization": headers["Authorization"].replace("Bearer", "Basic")},
            b"",
        ),
        ("POST", EVENTS, headers, _started(job)),  # no content type
        ("POST", EVENTS, {**headers, "Content-Type": "text/plain"}, _started(job)),
        ("POST", EVENTS, as_json, b"{nope"),
        ("POST", EVENTS, as_json, _started(job, bogus=1)),
        ("POST", EVENTS, as_json, _started(job, message="a\x00b")),
        ("POST", EVENTS, {}, _started(job)),
        ("POST", LOGS.format(job), headers, _lines("x")),  # no content type
        ("POST", LOGS.format(job), as_json, _lines("a\x00b")),
        ("POST", LOGS.format(job), as_json, b"{nope"),
        ("POST", LOGS.format(job), {}, _lines("x")),
        ("POST", LOGS.format("x"), as_json, _lines("x")),  # the route judges the path
        ("POST", LOGS.format(0), as_json, _lines("x")),
        ("POST", LOGS.format(2**62 + 1), as_json, _lines("x")),
        ("POST", LOGS.format("+5"), as_json, _lines("x")),
        ("POST", LOGS.format(job) + "x", as_json, _lines("x")),
        ("POST", HEARTBEAT, headers, _beat(job)),  # no content type
        ("POST", HEARTBEAT, as_json, b"{nope"),
        ("POST", HEARTBEAT, as_json, _beat(job, bogus=1)),
        ("POST", HEARTBEAT, {}, _beat(job)),
    ]
    for method, path, case_headers, body in cases:
        assert api.call_asgi(fast, method, path, case_headers, body)[0] == 299, (method, path)
        # A body read here reaches the route as it came.
        assert routed[-1] == (f"{method} {path.partition('?')[0]}?{path.partition('?')[2]}", body)
    assert len(routed) == len(cases)

    api.state.credentials.forget_node(NODE)  # as `node rm` does: the next check is the database's
    assert api.call_asgi(fast, "GET", f"{WORK}?node={NODE}&wait=0", headers)[0] == 299


def _normal(value: Any, jobs: tuple[int, ...], key: str = "") -> Any:
    """A reply with what differs between the two ways masked: the jobs' ids
    (in messages too), the GPUs each was given, and times."""
    if isinstance(value, dict):
        return {k: _normal(v, jobs, k) for k, v in value.items()}
    if key in ("job_id", "gpus") or key == "at" or key.endswith("_at"):
        return "<varies>"
    if isinstance(value, list):
        return [_normal(v, jobs, key) for v in value]
    if isinstance(value, str):
        for job in jobs:
            value = re.sub(rf"\b({job}|{job + 1000})\b", "<job>", value)
    return value


# Each case: the request, made from the agent's headers and the job it is
# about (a job of its own for each way).
CASES: dict[str, Any] = {
    "work with starts": lambda h, job: ("GET", f"{WORK}?node={NODE}&wait=0", h, b""),
    "work with nothing": lambda h, job: ("GET", f"{WORK}?node={NODE}&wait=0.01", h, b""),
    "work for another node": lambda h, job: ("GET", f"{WORK}?node=n2&wait=0", h, b""),
    "work with a bad wait": lambda h, job: ("GET", f"{WORK}?node={NODE}&wait=-1", h, b""),
    "work for a protocol 1 agent": lambda h, job: (
        "GET",
        f"{WORK}?node={NODE}&wait=0",
        {**h, PROTOCOL_HEADER: "1"},
        b"",
    ),
    "work from the future": lambda h, job: (
        "GET",
        f"{WORK}?node={NODE}&wait=0",
        {**h, PROTOCOL_HEADER: "999"},
        b"",
    ),
    "a start": lambda h, job: ("POST", EVENTS, h, _started(job)),
    "an exit": lambda h, job: (
        "POST",
        EVENTS,
        h,
        _batch(_event(job), _event(job, "exited", exit_code=3, at=2.0)),
    ),
    "an old attempt": lambda h, job: ("POST", EVENTS, h, _started(job, attempt=7)),
    "a job not on this node": lambda h, job: ("POST", EVENTS, h, _started(job + 1000)),
    "an unknown field": lambda h, job: ("POST", EVENTS, h, _started(job, bogus=1)),
    "NUL in a message": lambda h, job: ("POST", EVENTS, h, _started(job, message="\x00")),
    "not json": lambda h, job: ("POST", EVENTS, h, b"{nope"),
    "no events": lambda h, job: ("POST", EVENTS, h, b'{"events": []}'),
    "log lines": lambda h, job: ("POST", LOGS.format(job), h, _lines("one", "two")),
    "log lines of an old attempt": lambda h, job: (
        "POST",
        LOGS.format(job),
        h,
        _lines("one", attempt=7),
    ),
    "log lines of a job not on this node": lambda h, job: (
        "POST",
        LOGS.format(job + 1000),
        h,
        _lines("one"),
    ),
    "NUL in a log line": lambda h, job: ("POST", LOGS.format(job), h, _lines("a\x00b")),
    # Written out: the escape of a backslash, then `u0000` (no NUL at all).
    "a backslash before u0000": lambda h, job: ("POST", LOGS.format(job), h, _lines("\\u0000")),
    "no log lines": lambda h, job: ("POST", LOGS.format(job), h, _lines()),
    "a log job id that is not one": lambda h, job: ("POST", LOGS.format(0), h, _lines("x")),
    "a heartbeat": lambda h, job: ("POST", HEARTBEAT, h, _beat(job)),
    "a heartbeat with an orphan": lambda h, job: ("POST", HEARTBEAT, h, _beat(job, job + 1000)),
    "a heartbeat for another node": lambda h, job: ("POST", HEARTBEAT, h, _beat(name="n2")),
    "a heartbeat of an unknown field": lambda h, job: ("POST", HEARTBEAT, h, _beat(bogus=1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_fast_path_replies_as_the_route_does(api: Api, case: str) -> None:
    headers = {**_register(api), "Content-Type": "application/json"}
    state = api.state
    replies = []
    jobs = []
    for way in ("route", "fast"):
        job = _placed(api)
        jobs.append(job)
        if "work" not in case:  # the job taken, so its events are the node's to send
            assert api.get(f"{WORK}?node={NODE}&wait=0", headers=headers).status_code == 200
        elif case == "work with nothing":
            api.get(f"{WORK}?node={NODE}&wait=0", headers=headers)
        if way == "route":
            state.credentials.forget_node(NODE)
        else:
            # A call that checks the credential, and keeps it (a refusal, which changes nothing).
            assert api.get(f"{WORK}?node=n2", headers=headers).status_code == 403
            assert state.credentials.get(_digest(headers), state.clock.now()) is not None
        method, path, case_headers, body = CASES[case](headers, job)
        reply = api.client.request(method, path, headers=case_headers, content=body)
        replies.append((reply.status_code, reply.headers.get("content-type"), reply.json()))
    (route_status, route_type, route), (fast_status, fast_type, fast) = replies
    assert (fast_status, fast_type) == (route_status, route_type)
    assert _normal(fast, tuple(jobs)) == _normal(route, tuple(jobs))
    if case in ("work with starts", "work for a protocol 1 agent"):
        assert [s["job_id"] for s in fast["starts"]] == [jobs[1]]


def _digest(headers: dict[str, str]) -> str:
    return hash_token(headers["Authorization"].removeprefix("Bearer "))
