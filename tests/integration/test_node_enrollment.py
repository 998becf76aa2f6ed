"""Join tokens and node credentials on the manual clock: a join token expires,
works once, is stored only hashed; a new credential revokes the node's older
one at once; `node add` is for admins only and its input is checked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from server_api import Api
from sqlmodel import Session, select

from schedulearn.clock import ManualClock
from schedulearn.server import create_app
from schedulearn.server.db import Database
from schedulearn.server.models import JoinToken, NodeCredential
from schedulearn.settings import ServerSettings


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000.0)


@pytest.fixture
def timed(settings: ServerSettings, clock: ManualClock) -> Iterator[Api]:
    with TestClient(create_app(settings, clock)) as client:
        yield Api(client)


def _add(api: Api, name: str, **body: object) -> str:
    r = api.post("/api/v1/nodes", json={"name": name, **body})
    assert r.status_code == 201, r.text
    return str(r.json()["join_token"])


def _join(api: Api, token: str) -> Response:
    response: Response = api.client.post("/api/v1/agent/join", json={"join_token": token})
    return response


def test_a_join_token_expires(timed: Api, clock: ManualClock) -> None:
    fresh = _add(timed, "n1", expires_seconds=600)
    stale = _add(timed, "n1", expires_seconds=600)
    clock.advance(599)
    assert _join(timed, fresh).status_code == 200
    clock.advance(2)
    late = _join(timed, stale)
    assert late.status_code == 401
    assert "has expired" in late.json()["error"] and "node add n1" in late.json()["error"]


def test_tokens_are_stored_hashed_and_a_new_credential_revokes_the_old(
    timed: Api, settings: ServerSettings
) -> None:
    token = _add(timed, "n1")
    first = _join(timed, token).json()["credential"]
    headers = {"Authorization": f"Bearer {first}"}
    beat = {"name": "n1"}
    assert timed.post("/api/v1/agent/heartbeat", headers=headers, json=beat).status_code == 200
    second = _join(timed, _add(timed, "n1")).json()["credential"]
    # The cached identity of the first credential is dropped at once.
    old = timed.post("/api/v1/agent/heartbeat", headers=headers, json=beat)
    assert old.status_code == 401 and "revoked" in old.json()["error"]
    new = {"Authorization": f"Bearer {second}"}
    assert timed.post("/api/v1/agent/heartbeat", headers=new, json=beat).status_code == 200
    database = Database(settings.database_url)
    try:
        with Session(database.engine) as session:
            stored = [r.hash for r in session.exec(select(JoinToken)).all()]
            stored += [r.hash for r in session.exec(select(NodeCredential)).all()]
    finally:
        database.close()
    assert len(stored) == 4
    assert not {token, first, second} & set(stored)


def test_only_an_admin_adds_or_removes_nodes_and_names_are_checked(api: Api) -> None:
    bob = api.user_token("bob")
    assert api.post("/api/v1/nodes", headers=bob, json={"name": "n1"}).status_code == 403
    assert api.client.delete("/api/v1/nodes/n1", headers=bob).status_code == 403
    bad = api.post("/api/v1/nodes", json={"name": "no spaces/slashes"})
    assert bad.status_code == 422
    assert api.post("/api/v1/nodes", json={"name": "n1", "expires_seconds": 0}).status_code == 422
    assert _join(api, "sljoin_never-made").status_code == 401
