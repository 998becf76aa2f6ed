"""Identity over HTTP: tokens that end (revoked, expired: 401 at once, cache or not),
token lists without secrets, users as records (disabled users are locked out at
once), bounded priority, server-side web sessions (a signed-out or revoked
session's cookie gets 401), and the unix account a user's jobs run as.

The app runs in-process (`create_app`) on a manual clock, so expiry is shown
by moving the clock, not by waiting; with SCHEDULEARN_TEST_POSTGRES=1 the
database is a real PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from server_api import ADMIN, app_state

from schedulearn.clock import ManualClock
from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION, RunAs
from schedulearn.server import create_app
from schedulearn.server.services import users
from schedulearn.settings import ServerSettings

NOW = 1_900_000_000.0


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)}


ADMIN_H = _auth(ADMIN)


class Site:
    """An in-process server on a manual clock, spoken to as this release's CLI."""

    def __init__(self, client: TestClient, clock: ManualClock) -> None:
        self.client = client
        self.clock = clock

    def token(self, user: str, **body: object) -> tuple[int, str]:
        r = self.client.post("/api/v1/tokens", headers=ADMIN_H, json={"user": user, **body})
        assert r.status_code == 201, r.text
        return r.json()["id"], r.json()["token"]

    def whoami(self, token: str) -> int:
        return int(self.client.get("/api/v1/whoami", headers=_auth(token)).status_code)


@pytest.fixture
def site(settings: ServerSettings) -> Iterator[Site]:
    clock = ManualClock(NOW)
    with TestClient(create_app(settings, clock)) as client:
        yield Site(client, clock)


# --- tokens that end ------------------------------------------------------------


def test_a_revoked_token_gets_401_at_once_even_while_cached(site: Site) -> None:
    token_id, token = site.token("alice")
    assert site.whoami(token) == 200  # now in the token cache
    r = site.client.delete(f"/api/v1/tokens/{token_id}", headers=ADMIN_H)
    assert r.status_code == 200 and r.json()["state"] == "revoked"
    r = site.client.get("/api/v1/whoami", headers=_auth(token))
    assert r.status_code == 401 and "revoked" in r.json()["error"]
    # Revoking again changes nothing and says so the same way.
    assert site.client.delete(f"/api/v1/tokens/{token_id}", headers=ADMIN_H).status_code == 200


def test_an_expired_token_gets_401_even_while_cached(site: Site) -> None:
    _, token = site.token("alice", expires="1h")
    assert site.whoami(token) == 200
    site.clock.advance(3599)
    assert site.whoami(token) == 200
    site.clock.advance(1)
    r = site.client.get("/api/v1/whoami", headers=_auth(token))
    assert r.status_code == 401 and "expired" in r.json()["error"]


def test_expiry_takes_spans_and_dates_and_refuses_the_rest(site: Site) -> None:
    for expires, seconds in (
        ("90m", 5400),
        ("12h", 43200),
        ("30d", 30 * 86400),
        ("2w", 14 * 86400),
    ):
        r = site.client.post(
            "/api/v1/tokens", headers=ADMIN_H, json={"user": "a", "expires": expires}
        )
        assert r.status_code == 201 and r.json()["expires_at"] == NOW + seconds, r.text
    r = site.client.post(
        "/api/v1/tokens", headers=ADMIN_H, json={"user": "a", "expires": "2031-01-01"}
    )
    assert r.status_code == 201 and r.json()["expires_at"] == 1924992000.0
    for bad, says in (("soon", "neither a span"), ("2020-01-01", "in the past"), ("0d", "future")):
        r = site.client.post("/api/v1/tokens", headers=ADMIN_H, json={"user": "a", "expires": bad})
        assert r.status_code == 400 and says in r.json()["error"], (bad, r.text)


def test_token_list_shows_ids_and_dates_but_never_a_secret(site: Site) -> None:
    alice_id, alice = site.token("alice", name="laptop", expires="30d")
    _, bob = site.token("bob")
    assert site.whoami(alice) == 200
    r = site.client.get("/api/v1/tokens", headers=ADMIN_H)
    assert r.status_code == 200
    for secret in (alice, bob, ADMIN):
        assert secret not in r.text
    rows = {t["id"]: t for t in r.json()["items"]}
    row = rows[alice_id]
    assert (row["user"], row["role"], row["name"], row["state"]) == (
        "alice",
        "user",
        "laptop",
        "active",
    )
    assert row["created_at"] == NOW and row["expires_at"] == NOW + 30 * 86400
    assert row["last_used_at"] == NOW
    assert set(row) == {
        "id", "user", "role", "name", "state", "created_at", "expires_at", "last_used_at",
        "revoked_at",
    }  # fmt: skip
    # A user sees their own tokens only, and may revoke only those.
    mine = site.client.get("/api/v1/tokens", headers=_auth(alice)).json()["items"]
    assert [t["user"] for t in mine] == ["alice"]
    r = site.client.get("/api/v1/tokens", params={"user": "bob"}, headers=_auth(alice))
    assert r.status_code == 403
    bob_id = next(t["id"] for t in rows.values() if t["user"] == "bob")
    assert site.client.delete(f"/api/v1/tokens/{bob_id}", headers=_auth(alice)).status_code == 404
    assert site.whoami(bob) == 200
    # Revoked tokens leave the default listing, and show with ?all=true.
    site.client.delete(f"/api/v1/tokens/{alice_id}", headers=ADMIN_H)
    ids = [t["id"] for t in site.client.get("/api/v1/tokens", headers=ADMIN_H).json()["items"]]
    assert alice_id not in ids
    everything = site.client.get("/api/v1/tokens", params={"all": True}, headers=ADMIN_H).json()
    assert {t["id"]: t["state"] for t in everything["items"]}[alice_id] == "revoked"


def test_only_an_admin_makes_tokens(site: Site) -> None:
    _, alice = site.token("alice")
    r = site.client.post("/api/v1/tokens", headers=_auth(alice), json={"user": "alice"})
    assert r.status_code == 403


# --- users ------------------------------------------------------------------------


def test_users_are_records_an_admin_adds_lists_and_disables(site: Site) -> None:
    r = site.client.post(
        "/api/v1/users",
        headers=ADMIN_H,
        json={"name": "carol", "unix_account": "cw", "priority_max": 5},
    )
    assert r.status_code == 201, r.text
    assert r.json()["unix_account"] == "cw" and r.json()["priority_max"] == 5
    again = site.client.post("/api/v1/users", headers=ADMIN_H, json={"name": "carol"})
    assert again.status_code == 409 and "user set carol" in again.json()["error"]
    _, token = site.token("dave")  # a token for someone new makes their record
    listed = {
        u["name"]: u for u in site.client.get("/api/v1/users", headers=ADMIN_H).json()["items"]
    }
    assert listed["dave"]["unix_account"] == "dave" and not listed["dave"]["allow_root"]
    assert (listed["dave"]["priority_min"], listed["dave"]["priority_max"]) == (-100, 0)
    # Users are an admin's business.
    assert site.client.get("/api/v1/users", headers=_auth(token)).status_code == 403
    r = site.client.post("/api/v1/users", headers=_auth(token), json={"name": "eve"})
    assert r.status_code == 403
    # Root needs saying so.
    r = site.client.post(
        "/api/v1/users", headers=ADMIN_H, json={"name": "x", "unix_account": "root"}
    )
    assert r.status_code == 400 and "--allow-root" in r.json()["error"]


def test_a_disabled_user_is_locked_out_at_once_and_back_when_enabled(site: Site) -> None:
    _, token = site.token("mallory")
    assert _submit(site, token, 0)[0] == 201
    assert site.whoami(token) == 200  # cached
    r = site.client.patch("/api/v1/users/mallory", headers=ADMIN_H, json={"disabled": True})
    assert r.status_code == 200 and r.json()["disabled_at"] == NOW
    status, text = _submit(site, token, 0)
    assert status == 401 and "mallory is disabled" in text
    assert site.whoami(token) == 401
    # A new token for a disabled user is refused too.
    r = site.client.post("/api/v1/tokens", headers=ADMIN_H, json={"user": "mallory"})
    assert r.status_code == 400 and "disabled" in r.json()["error"]
    site.client.patch("/api/v1/users/mallory", headers=ADMIN_H, json={"disabled": False})
    assert site.whoami(token) == 200


def test_an_admin_cannot_disable_themselves(site: Site) -> None:
    r = site.client.patch("/api/v1/users/admin", headers=ADMIN_H, json={"disabled": True})
    assert r.status_code == 400 and "yourself" in r.json()["error"]


def test_unix_account_of_is_the_name_unless_set_and_none_for_no_record_or_disabled(
    site: Site,
) -> None:
    site.token("erin")
    site.client.post(
        "/api/v1/users",
        headers=ADMIN_H,
        json={"name": "ops", "unix_account": "root", "allow_root": True},
    )
    site.client.post(
        "/api/v1/users", headers=ADMIN_H, json={"name": "fay", "unix_account": "f_a-y"}
    )
    database = app_state(site.client).db
    with database.session() as session:
        assert users.unix_account_of(session, "erin") == RunAs(account="erin", allow_root=False)
        assert users.unix_account_of(session, "fay") == RunAs(account="f_a-y", allow_root=False)
        assert users.unix_account_of(session, "ops") == RunAs(account="root", allow_root=True)
        assert users.unix_account_of(session, "nobody") is None
        # The scheduler's pass reads every user at once; it agrees with the one-by-one look-up.
        every = users.unix_accounts(session)
        assert {"erin", "fay", "ops"} <= set(every) and "nobody" not in every
        assert all(users.unix_account_of(session, name) == run_as for name, run_as in every.items())
    site.client.patch("/api/v1/users/fay", headers=ADMIN_H, json={"disabled": True})
    with database.session() as session:
        assert users.unix_account_of(session, "fay") is None
        assert "fay" not in users.unix_accounts(session)


# --- bounded priority -----------------------------------------------------------------


def _submit(site: Site, token: str, priority: int) -> tuple[int, str]:
    r = site.client.post(
        "/api/v1/jobs",
        headers=_auth(token),
        json={"command": "true", "gpus": 0, "priority": priority},
    )
    return r.status_code, r.text


def test_users_set_priority_within_their_range_and_admins_beyond(site: Site) -> None:
    _, alice = site.token("alice")
    assert _submit(site, alice, 0)[0] == 201
    assert _submit(site, alice, -100)[0] == 201
    status, text = _submit(site, alice, 1)
    assert status == 400 and "outside the range you may use (-100..0)" in text, text
    status, text = _submit(site, alice, -101)
    assert status == 400 and "-100..0" in text
    assert site.client.get("/api/v1/whoami", headers=_auth(alice)).json()["priority_max"] == 0
    # An admin raises alice's limit: it applies to her next submission.
    r = site.client.patch("/api/v1/users/alice", headers=ADMIN_H, json={"priority_max": 50})
    assert r.status_code == 200 and r.json()["priority_max"] == 50
    assert _submit(site, alice, 50)[0] == 201
    status, text = _submit(site, alice, 51)
    assert status == 400 and "-100..50" in text
    # Back to the server's range.
    site.client.patch("/api/v1/users/alice", headers=ADMIN_H, json={"clear_priority_max": True})
    assert _submit(site, alice, 50)[0] == 400
    # Admins have no bound.
    assert _submit(site, ADMIN, 1_000_000)[0] == 201
    assert site.client.get("/api/v1/whoami", headers=ADMIN_H).json()["priority_max"] is None


def test_the_server_setting_sets_the_range(database_url: str) -> None:
    settings = ServerSettings(
        database_url=database_url,
        admin_token=ADMIN,
        user_priority_min=-5,
        user_priority_max=10,
    )
    with TestClient(create_app(settings, ManualClock(NOW))) as client:
        site = Site(client, ManualClock(NOW))
        _, bob = site.token("bob")
        assert _submit(site, bob, 10)[0] == 201
        status, text = _submit(site, bob, 11)
        assert status == 400 and "(-5..10)" in text


# --- web sessions on the server ----------------------------------------------------------


def _sign_in(client: TestClient, token: str) -> str:
    """Sign in through the form as a browser does; the session cookie's value."""
    form = client.get("/ui/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce, form.text
    r = client.post(
        "/ui/login",
        data={"token": token, "nonce": nonce[1], "next": "/ui/jobs"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    cookie = r.cookies.get("sl_session")
    assert cookie and token not in cookie
    set_cookie = r.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=lax" in set_cookie
    return str(cookie)


def _as(client: TestClient, cookie: str) -> TestClient:
    """The client carrying this session cookie (and no other)."""
    client.cookies.clear()
    client.cookies.set("sl_session", cookie)
    return client


def _page(client: TestClient, cookie: str) -> int:
    return int(_as(client, cookie).get("/ui/jobs", follow_redirects=False).status_code)


def test_a_signed_out_cookie_gets_401_at_once(site: Site) -> None:
    _, token = site.token("ana")
    cookie = _sign_in(site.client, token)
    page = _as(site.client, cookie).get("/ui/jobs")
    assert page.status_code == 200
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf
    # Sign-out needs the session's CSRF token.
    r = _as(site.client, cookie).post("/ui/logout", data={"csrf": "forged"}, follow_redirects=False)
    assert r.status_code == 403 and _page(site.client, cookie) == 200
    r = _as(site.client, cookie).post("/ui/logout", data={"csrf": csrf[1]}, follow_redirects=False)
    assert r.status_code == 303
    replayed = _as(site.client, cookie).get("/ui/jobs", follow_redirects=False)
    assert replayed.status_code == 401 and "session has ended" in replayed.text
    # The token itself still works: signing out ends the session, not the token.
    assert site.whoami(token) == 200


def test_revoking_a_token_or_disabling_its_user_ends_its_web_sessions(site: Site) -> None:
    token_id, token = site.token("ana")
    first, second = _sign_in(site.client, token), _sign_in(site.client, token)
    assert _page(site.client, first) == 200 and _page(site.client, second) == 200
    site.client.delete(f"/api/v1/tokens/{token_id}", headers=ADMIN_H)
    assert _page(site.client, first) == 401 and _page(site.client, second) == 401
    _, bens = site.token("ben")
    cookie = _sign_in(site.client, bens)
    site.client.patch("/api/v1/users/ben", headers=ADMIN_H, json={"disabled": True})
    assert _page(site.client, cookie) == 401


def test_a_session_ends_when_its_token_expires_and_after_a_week(site: Site) -> None:
    _, short = site.token("ana", expires="1h")
    cookie = _sign_in(site.client, short)
    site.clock.advance(3600)
    assert _page(site.client, cookie) == 401
    _, token = site.token("ana")
    cookie = _sign_in(site.client, token)
    site.clock.advance(7 * 86400 - 1)
    assert _page(site.client, cookie) == 200
    site.clock.advance(1)
    assert _page(site.client, cookie) == 401


def test_a_forged_or_absent_cookie_is_sent_to_sign_in(site: Site) -> None:
    assert _page(site.client, "made-up") == 401
    site.client.cookies.clear()
    r = site.client.get("/ui/jobs", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")


def test_a_revoked_or_expired_token_cannot_sign_in(site: Site) -> None:
    token_id, token = site.token("ana")
    site.client.delete(f"/api/v1/tokens/{token_id}", headers=ADMIN_H)
    form = site.client.get("/ui/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce
    r = site.client.post("/ui/login", data={"token": token, "nonce": nonce[1], "next": "/ui/jobs"})
    assert r.status_code == 401 and "revoked" in r.text


# --- several replicas on one database -------------------------------------------------


@pytest.mark.parametrize("cache_seconds", [0.0, 2.0])
def test_another_replica_honours_a_revocation_within_its_cache_time(
    settings: ServerSettings, cache_seconds: float
) -> None:
    """Replica A revokes; replica B, which had the token cached, refuses it once its
    cache time has passed (at once with 0), and B's web sessions end at once."""
    clock = ManualClock(NOW)
    settings = settings.model_copy(update={"auth_cache_seconds": cache_seconds})
    with (
        TestClient(create_app(settings, clock)) as a,
        TestClient(create_app(settings, clock)) as b,
    ):
        first, second = Site(a, clock), Site(b, clock)
        token_id, token = first.token("alice")
        cookie = _sign_in(second.client, token)
        assert second.whoami(token) == 200 and _page(second.client, cookie) == 200
        assert a.delete(f"/api/v1/tokens/{token_id}", headers=ADMIN_H).status_code == 200
        assert first.whoami(token) == 401
        assert _page(second.client, cookie) == 401
        clock.advance(cache_seconds)
        assert second.whoami(token) == 401
