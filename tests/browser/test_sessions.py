"""Web sessions end when they should, in a real browser against a real server process:
after Sign out the old cookie gets 401 (replayed in a fresh browser), and revoking the
token a browser signed in with sends that browser back to the sign-in form at once."""

from __future__ import annotations

import re

import httpx
import pytest
from browsing import ADMIN, Visits
from playwright.sync_api import Cookie, Page, expect

from schedulearn.cli.localcluster import ServerProcess
from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION

pytestmark = pytest.mark.browser


def _token(server: ServerProcess, user: str) -> tuple[int, str]:
    reply = httpx.post(
        f"{server.url}/api/v1/tokens",
        headers={"Authorization": f"Bearer {ADMIN}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)},
        json={"user": user, "name": "browser test"},
    )
    reply.raise_for_status()
    return int(reply.json()["id"]), str(reply.json()["token"])


def _session_cookie(page: Page) -> Cookie:
    cookies = page.context.cookies()
    found = [c for c in cookies if c["name"] == "sl_session"]
    assert len(found) == 1, cookies
    cookie = found[0]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    return cookie


def test_a_signed_out_cookie_gets_401_in_another_browser(
    empty_server: ServerProcess, visit_empty: Visits
) -> None:
    _, token = _token(empty_server, "sally")
    page = visit_empty(token).page
    expect(page.get_by_test_id("who")).to_have_text("sally")
    cookie = _session_cookie(page)
    assert token not in str(cookie["value"])
    page.click("text=Sign out")
    expect(page).to_have_url(re.compile(r"/ui/login"))
    # Someone who copied the cookie before sign-out replays it in their own browser.
    thief = visit_empty(None).page
    thief.context.add_cookies(
        [
            {
                "name": cookie["name"],
                "value": cookie["value"],
                "domain": cookie["domain"],
                "path": cookie["path"],
                "expires": cookie["expires"],
                "httpOnly": cookie["httpOnly"],
                "secure": cookie["secure"],
                "sameSite": cookie["sameSite"],
            }
        ]
    )
    response = thief.goto(f"{empty_server.url}/ui/jobs")
    assert response is not None and response.status == 401
    expect(thief.get_by_test_id("login-error")).to_contain_text("session has ended")
    expect(thief.get_by_test_id("who")).to_have_count(0)


def test_revoking_the_token_ends_a_signed_in_browser_at_once(
    empty_server: ServerProcess, visit_empty: Visits
) -> None:
    token_id, token = _token(empty_server, "rex")
    page = visit_empty(token).page
    expect(page.get_by_test_id("who")).to_have_text("rex")
    httpx.delete(
        f"{empty_server.url}/api/v1/tokens/{token_id}",
        headers={"Authorization": f"Bearer {ADMIN}"},
    ).raise_for_status()
    response = page.goto(f"{empty_server.url}/ui/queue")
    assert response is not None and response.status == 401
    expect(page.get_by_test_id("login-error")).to_contain_text("session has ended")
    # The revoked token cannot sign in again either.
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page.get_by_test_id("login-error")).to_contain_text("revoked")
