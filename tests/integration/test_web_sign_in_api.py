"""Web sign-in without a token, over HTTP on a manual clock (so a link's end and the
failure window are shown by moving the clock, not by waiting), on SQLite and with
SCHEDULEARN_TEST_POSTGRES=1 on PostgreSQL: who may set a password and how it is kept,
a disabled user, one-time links that end, and failed sign-ins held off for a window."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from server_api import ADMIN, AGENT
from sqlmodel import Session

from schedulearn.clock import ManualClock
from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from schedulearn.server import create_app
from schedulearn.server.models import User
from schedulearn.server.state import AppState
from schedulearn.settings import ServerSettings

NOW = 1_900_000_000.0
PASSWORD = "a long enough secret"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)}


class Site:
    def __init__(self, client: TestClient, clock: ManualClock) -> None:
        self.client = client
        self.clock = clock

    @property
    def state(self) -> AppState:
        state: AppState = self.client.app.state.sl  # type: ignore[attr-defined]  # Starlette app
        return state

    def token(self, user: str) -> str:
        r = self.client.post("/api/v1/tokens", headers=_auth(ADMIN), json={"user": user})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    def set_password(self, caller: str, user: str, password: str = PASSWORD) -> int:
        r = self.client.put(
            f"/api/v1/users/{user}/password", headers=_auth(caller), json={"password": password}
        )
        return int(r.status_code)

    def signed_in(self) -> bool:
        return bool(self.client.get("/ui/jobs", follow_redirects=False).status_code == 200)

    def sign_in(self, **form: str) -> tuple[int, str]:
        """POST the sign-in form as a browser does: (status, page or redirect target)."""
        self.client.cookies.clear()
        page = self.client.get("/ui/login")
        nonce = re.search(r'name="nonce" value="([^"]+)"', page.text)
        assert nonce, page.text
        r = self.client.post("/ui/login", data={"nonce": nonce[1], **form}, follow_redirects=False)
        return r.status_code, r.headers.get("location", r.text)


@pytest.fixture
def site(settings: ServerSettings) -> Iterator[Site]:
    clock = ManualClock(NOW)
    with TestClient(create_app(settings, clock)) as client:
        yield Site(client, clock)


def test_who_may_set_a_password_and_how_it_is_kept(site: Site) -> None:
    ana, bob = site.token("ana"), site.token("bob")
    assert site.set_password(ana, "ana") == 200
    assert site.set_password(ana, "bob") == 403  # only an admin sets someone else's
    assert site.set_password(ADMIN, "bob") == 200
    assert site.set_password(ADMIN, "nobody") == 404
    r = site.client.put(
        "/api/v1/users/bob/password", headers=_auth(bob), json={"password": "short"}
    )
    assert r.status_code == 422 and "give at least 10" in r.text
    with Session(site.state.db.engine) as session:
        row = session.get(User, "ana")
        assert row is not None and row.password_hash is not None
        assert row.password_hash.startswith("scrypt$") and PASSWORD not in row.password_hash
        assert row.password_role == "user"
    # Two users with one password store different hashes (each has its own salt).
    with Session(site.state.db.engine) as session:
        hashes = {
            u.password_hash for u in (session.get(User, "ana"), session.get(User, "bob")) if u
        }
    assert len(hashes) == 2

    assert site.sign_in(user="ana", password=PASSWORD) == (303, "/ui/cluster")
    assert site.signed_in()
    # A new password signs out what the old one signed in; token sessions stay.
    browser = dict(site.client.cookies)
    assert site.sign_in(token=ana) == (303, "/ui/cluster")
    with_token = dict(site.client.cookies)
    assert site.set_password(ana, "ana", PASSWORD + " again") == 200
    site.client.cookies.clear()
    site.client.cookies.update(browser)
    assert not site.signed_in()
    site.client.cookies.clear()
    site.client.cookies.update(with_token)
    assert site.signed_in()
    assert site.sign_in(user="ana", password=PASSWORD)[0] == 401
    assert site.set_password(ana, "ana") == 200
    site.client.patch("/api/v1/users/ana", headers=_auth(ADMIN), json={"disabled": True})
    status, page = site.sign_in(user="ana", password=PASSWORD)
    assert status == 401 and "User ana is disabled" in page
    # Without the password, a disabled user reads like any wrong guess.
    status, page = site.sign_in(user="ana", password="a wrong guess")
    assert status == 401 and "Wrong user name or password." in page


def test_a_link_ends_after_its_time_and_works_once(site: Site) -> None:
    token = site.token("lin")
    made = site.client.post("/api/v1/web-login", headers=_auth(token))
    assert made.status_code == 201, made.text
    link = made.json()
    assert link["expires_at"] == NOW + 300 and link["user"] == "lin"
    assert link["path"] == f"/ui/login?code={link['code']}"
    site.clock.advance(299)
    assert site.sign_in(code=link["code"]) == (303, "/ui/cluster")
    status, page = site.sign_in(code=link["code"])
    assert status == 400 and "already used" in page

    late = site.client.post("/api/v1/web-login", headers=_auth(token)).json()
    site.clock.advance(300)
    status, page = site.sign_in(code=late["code"])
    assert status == 400 and "This sign-in link expired at" in page
    status, page = site.sign_in(code="not-a-code")
    assert status == 400 and "not known" in page
    # An agent token cannot make one.
    made = site.client.post("/api/v1/web-login", headers=_auth(AGENT))
    assert made.status_code == 403


def test_failures_are_held_off_until_the_window_passes(site: Site) -> None:
    site.token("carl")
    assert site.set_password(ADMIN, "carl") == 200
    for _ in range(5):
        assert site.sign_in(user="carl", password="a wrong guess")[0] == 401
    status, page = site.sign_in(user="carl", password=PASSWORD)
    assert status == 429 and "try again in 15 minutes" in page
    site.clock.advance(14 * 60)
    status, page = site.sign_in(user="carl", password=PASSWORD)
    assert status == 429 and "try again in 1 minute," in page
    site.clock.advance(60)
    assert site.sign_in(user="carl", password=PASSWORD) == (303, "/ui/cluster")
