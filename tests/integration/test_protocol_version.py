"""The server's protocol version check, over HTTP: the versions it serves, the
400 naming both versions, what it leaves alone (no header, pages outside
/api/), and the CLI's client against a real server process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from server_api import ADMIN, AGENT, Api

from schedulearn.cli.client import ApiError, Client
from schedulearn.cli.localcluster import ServerProcess
from schedulearn.protocol import (
    OLDEST_PROTOCOL,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    SERVER_PROTOCOL_HEADER,
)

SPEAKS = f"{OLDEST_PROTOCOL}..{PROTOCOL_VERSION}"


def _as(api: Api, version: str | None, token: str = ADMIN) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if version is not None:
        headers[PROTOCOL_HEADER] = version
    return headers


def test_every_version_the_server_speaks_is_served_and_so_is_a_call_without_one(
    api: Api,
) -> None:
    for version in [None, *map(str, range(OLDEST_PROTOCOL, PROTOCOL_VERSION + 1))]:
        r = api.get("/api/v1/jobs", headers=_as(api, version))
        assert r.status_code == 200, (version, r.text)


def test_a_newer_cli_is_refused_with_both_versions_and_what_to_upgrade(api: Api) -> None:
    newer = PROTOCOL_VERSION + 1
    r = api.get("/api/v1/jobs", headers=_as(api, str(newer)))
    assert r.status_code == 400
    assert r.json() == {
        "error": f"this CLI speaks protocol {newer}, this server speaks {SPEAKS}; "
        "upgrade the server (or use a CLI of the server's release)"
    }
    assert r.headers[SERVER_PROTOCOL_HEADER] == SPEAKS


def test_an_older_agent_is_refused_before_its_request_is_judged(api: Api) -> None:
    older = OLDEST_PROTOCOL - 1
    # A body this release would refuse for its own reasons: the version speaks first.
    r = api.post("/api/v1/agent/register", headers=_as(api, str(older), AGENT), json={"nom": "n1"})
    assert r.status_code == 400
    assert r.json()["error"] == (
        f"this agent speaks protocol {older}, this server speaks {SPEAKS}; upgrade the agent"
    )
    # The same body at this release's version is judged on its fields.
    r = api.post(
        "/api/v1/agent/register", headers=_as(api, str(PROTOCOL_VERSION), AGENT), json={"nom": "n1"}
    )
    assert r.status_code == 422 and "nom" in r.text


def test_a_malformed_version_is_refused_with_what_to_send(api: Api) -> None:
    r = api.get("/api/v1/nodes", headers=_as(api, "v2"))
    assert r.status_code == 400
    assert f"{PROTOCOL_HEADER} header must be a whole number" in r.json()["error"]


def test_pages_and_probes_outside_the_api_are_not_judged(api: Api) -> None:
    # The web UI, health checks and metrics: browsers and probes send no version.
    for path in ("/healthz", "/metrics", "/ui/login"):
        r = api.get(path, headers={PROTOCOL_HEADER: str(PROTOCOL_VERSION + 1)})
        assert r.status_code == 200, (path, r.status_code, r.text[:200])


def test_the_header_is_in_the_api_schema(api: Api) -> None:
    schema = api.get("/openapi.json").json()
    jobs = schema["paths"]["/api/v1/jobs"]["get"]
    assert PROTOCOL_HEADER in [p["name"] for p in jobs["parameters"] if p["in"] == "header"]
    assert "400" in jobs["responses"]
    health = schema["paths"]["/healthz"]["get"]
    assert PROTOCOL_HEADER not in [p["name"] for p in health.get("parameters", [])]


@pytest.fixture
def server_process(tmp_path: Path, database_url: str) -> Iterator[ServerProcess]:
    server = ServerProcess(database_url, tmp_path / "server.log", ADMIN, AGENT)
    server.start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.kill()


def test_a_newer_cli_speaks_this_servers_version_and_an_older_one_is_refused(
    server_process: ServerProcess,
) -> None:
    with Client(server_process.url, ADMIN) as client:
        assert client.jobs().total == 0
        assert client.peer().speak == PROTOCOL_VERSION
    # A CLI of a later protocol learns this server's range and speaks its newest
    # version, so its calls are served (protocol_calls).
    newer = Client(server_process.url, ADMIN, protocol=PROTOCOL_VERSION + 1)
    with newer:
        assert newer.jobs().total == 0
        peer = newer.peer()
        assert (peer.oldest, peer.newest, peer.speak) == (
            OLDEST_PROTOCOL,
            PROTOCOL_VERSION,
            PROTOCOL_VERSION,
        )
    # One older than the server serves is refused by the server, which says so.
    older = Client(server_process.url, ADMIN, protocol=OLDEST_PROTOCOL - 1)
    with older, pytest.raises(ApiError) as refused:
        older.jobs()
    assert refused.value.status == 400
    assert refused.value.message == (
        f"this CLI speaks protocol {OLDEST_PROTOCOL - 1}, this server speaks {SPEAKS}; "
        "upgrade the CLI"
    )


def test_every_api_reply_says_what_the_server_speaks_and_the_probe_answers_it(api: Api) -> None:
    for path, status in (("/api/v1/jobs", 200), ("/api/v1/jobs/999", 404)):
        r = api.get(path, headers=_as(api, str(PROTOCOL_VERSION)))
        assert (r.status_code, r.headers[SERVER_PROTOCOL_HEADER]) == (status, SPEAKS)
    # The probe needs no token and no version.
    r = api.get("/api/v1/protocol", headers={})
    assert r.status_code == 200
    assert r.json() == {"oldest": OLDEST_PROTOCOL, "newest": PROTOCOL_VERSION}
    assert r.headers[SERVER_PROTOCOL_HEADER] == SPEAKS
    assert SERVER_PROTOCOL_HEADER not in api.get("/healthz", headers={}).headers
