"""Tokens and web sessions end on every replica (issue 11), with real server processes.

Two `schedulearn server` processes share one PostgreSQL database (the
fixtures start it on the SQLite pass too). A token is used on both, and a
web session signed in on one is used on the other; then:

- signing out on replica A ends the session on replica B at once (sessions
  are read from the database on every page);
- revoking the token on A ends it on A at once, and on B, which still holds
  it in its auth cache, at once when B's cache is off
  (`SCHEDULEARN_AUTH_CACHE_SECONDS=0`) and otherwise once that many seconds
  have passed (docs/security.md states the bound; no timing is asserted here).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pg_server import Postgres
from sqlalchemy import Connection, create_engine, event, text

from schedulearn.cli.localcluster import ServerProcess
from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from schedulearn.server.app import bootstrap
from schedulearn.server.auth import hash_token
from schedulearn.server.db import Database, migrate
from schedulearn.settings import ServerSettings
from waiting import wait_until

pytestmark = pytest.mark.postgres

ADMIN = "replica-admin-token"
AGENT = "replica-agent-token"


@pytest.fixture
def replicas(
    request: pytest.FixtureRequest, postgres_server: Postgres, tmp_path: Path
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    cache = str(getattr(request, "param", 2.0))
    url = postgres_server.new_database()
    started: list[ServerProcess] = []
    try:
        for name in ("a", "b"):
            server = ServerProcess(
                url,
                tmp_path / f"server-{name}.log",
                ADMIN,
                AGENT,
                env={"SCHEDULEARN_AUTH_CACHE_SECONDS": cache},
            )
            server.start()
            started.append(server)
            server.wait_ready()
        yield started[0], started[1]
    finally:
        for server in started:
            server.kill()


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)}


def _whoami(server: ServerProcess, token: str) -> int:
    return httpx.get(f"{server.url}/api/v1/whoami", headers=_auth(token), timeout=30).status_code


def _sign_in(server: ServerProcess, token: str) -> tuple[str, str]:
    """The session cookie and its CSRF token, signed in on `server`."""
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        form = browser.get("/ui/login")
        nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
        assert nonce, form.text
        r = browser.post("/ui/login", data={"token": token, "nonce": nonce[1], "next": "/ui/jobs"})
        assert r.status_code in (200, 303), r.text
        cookie = browser.cookies.get("sl_session")
        assert cookie
        page = browser.get("/ui/jobs")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf, page.text
        return cookie, csrf[1]


def _page(server: ServerProcess, cookie: str) -> int:
    r = httpx.get(
        f"{server.url}/ui/jobs", cookies={"sl_session": cookie}, timeout=30, follow_redirects=False
    )
    return r.status_code


def _token(server: ServerProcess, user: str) -> tuple[int, str]:
    r = httpx.post(
        f"{server.url}/api/v1/tokens", headers=_auth(ADMIN), json={"user": user}, timeout=30
    )
    assert r.status_code == 201, r.text
    return int(r.json()["id"]), str(r.json()["token"])


def test_signing_out_on_one_replica_ends_the_session_on_the_other_at_once(
    replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = replicas
    _, token = _token(a, "alice")
    cookie, csrf = _sign_in(a, token)
    assert _page(a, cookie) == 200 and _page(b, cookie) == 200
    out = httpx.post(
        f"{a.url}/ui/logout",
        data={"csrf": csrf},
        cookies={"sl_session": cookie},
        timeout=30,
        follow_redirects=False,
    )
    assert out.status_code == 303, out.text
    assert _page(b, cookie) == 401 and _page(a, cookie) == 401
    assert _whoami(b, token) == 200  # signing out ends the session, not the token


@pytest.mark.parametrize("replicas", [0, 2.0], indirect=True, ids=["no-cache", "cache-2s"])
def test_a_revoked_token_ends_on_every_replica(
    replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = replicas
    token_id, token = _token(a, "alice")
    cookie, _ = _sign_in(b, token)
    assert _whoami(a, token) == 200 and _whoami(b, token) == 200  # now in both caches
    revoked = httpx.delete(f"{a.url}/api/v1/tokens/{token_id}", headers=_auth(ADMIN), timeout=30)
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    assert _whoami(a, token) == 401  # the replica that revoked: at once
    assert _page(b, cookie) == 401  # web sessions: at once, everywhere
    if float(b.env["SCHEDULEARN_AUTH_CACHE_SECONDS"]) == 0:
        assert _whoami(b, token) == 401
    else:
        wait_until(lambda: _whoami(b, token) == 401, 30, "replica B to drop the revoked token")
    r = httpx.get(f"{b.url}/api/v1/whoami", headers=_auth(token), timeout=30)
    assert r.status_code == 401 and "revoked" in r.json()["error"]


def test_replicas_starting_at_once_store_the_settings_tokens_once(
    postgres_server: Postgres,
) -> None:
    """Two replicas given the same tokens, starting at once, each store them: the
    one whose insert comes second finds the row stored and starts (it failed
    with a unique violation on `ix_token_hash`, and the replica exited).

    The other replica's insert is made, on its own connection, just before this
    replica's own INSERT of the admin token: the moment the two raced in CI.
    """
    url = postgres_server.new_database()
    settings = ServerSettings(database_url=url, admin_token=ADMIN, agent_token=AGENT)
    database = Database(url)
    rival = create_engine(url)
    raced: list[str] = []

    def other_replica_first(
        conn: Connection,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        if not raced and statement.startswith("INSERT INTO token"):
            raced.append(statement)
            with rival.begin() as other:
                other.execute(
                    text(
                        'INSERT INTO token (hash, "user", role, name, created_at) '
                        "VALUES (:hash, 'admin', 'admin', 'from the settings', 0)"
                    ),
                    {"hash": hash_token(ADMIN)},
                )

    try:
        migrate(database.engine)
        event.listen(database.engine, "before_cursor_execute", other_replica_first)
        assert bootstrap(database, settings, 1.0) == {}
        assert raced  # the race did happen
        with rival.connect() as conn:
            stored = conn.execute(text("SELECT role, count(*) FROM token GROUP BY role"))
            assert dict(stored.tuples().all()) == {"admin": 1, "agent": 1}
    finally:
        database.engine.dispose()
        rival.dispose()
