"""Signing in without pasting a token, in Chromium against real server processes: a user
name and password (a wrong one refused, saying nothing of whether the user exists), a
one-time link from `schedulearn web-login` (it works once; a second browser and an
expired link are refused, saying why); and the Submit form's fields for time limit,
dependency, array, model and restarts reaching the job, with errors beside their fields."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from browsing import ADMIN, AGENT, Visits, screenshot
from playwright.sync_api import Browser, Page, expect

from schedulearn.cli.localcluster import ServerProcess
from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from waiting import wait_until

pytestmark = pytest.mark.browser

PASSWORD = "a long enough secret"


def _server(prefix: str, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    work = Path(tempfile.mkdtemp(prefix=prefix))
    server = ServerProcess(
        f"sqlite:///{work / 'schedulearn.db'}", work / "server.log", ADMIN, AGENT, env=env
    )
    server.start()
    try:
        server.wait_ready()

        # It answers /readyz before its app has loaded; wait for an API call to work.
        def status() -> int:
            with _api(server) as api:
                return api.get("/policy").status_code

        wait_until(
            status,
            120,
            "the server's app to load",
            until=(200).__eq__,
            ignore=(httpx.HTTPError,),
        )
        yield server
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """A server of its own: its jobs and users stay out of the other tests' pages."""
    yield from _server("sl-browser-sign-in-")


@pytest.fixture(scope="module")
def brief_links() -> Iterator[ServerProcess]:
    """A server whose sign-in links end a second after they are made."""
    yield from _server("sl-browser-brief-links-", {"SCHEDULEARN_WEB_LOGIN_SECONDS": "1"})


@pytest.fixture
def visits(browser: Browser) -> Iterator[dict[str, Visits]]:
    opened: dict[str, Visits] = {}
    yield opened
    for visits in opened.values():
        visits.close_and_check()


def _visit(visits: dict[str, Visits], browser: Browser, server: ServerProcess) -> Page:
    found = visits.setdefault(server.url, Visits(browser, server.url))
    return found(None).page


def _api(server: ServerProcess, token: str = ADMIN) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.url}/api/v1",
        headers={"Authorization": f"Bearer {token}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)},
        timeout=30,
    )


def _user_token(server: ServerProcess, user: str) -> str:
    with _api(server) as api:
        made = api.post("/tokens", json={"user": user})
        made.raise_for_status()
        return str(made.json()["token"])


def _link(server: ServerProcess, token: str) -> str:
    with _api(server, token) as api:
        made = api.post("/web-login")
        made.raise_for_status()
        return f"{server.url}{made.json()['path']}"


def test_sign_in_with_a_user_name_and_password(
    server: ServerProcess, browser: Browser, visits: dict[str, Visits]
) -> None:
    token = _user_token(server, "pam")
    with _api(server, token) as api:
        api.put("/users/pam/password", json={"password": PASSWORD}).raise_for_status()
    page = _visit(visits, browser, server)
    page.goto(f"{server.url}/ui/jobs")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=/ui/jobs"))
    page.fill("#user", "pam")
    page.fill("#password", "not the password")
    page.click("button[type=submit]")
    expect(page.get_by_test_id("login-error")).to_have_text("Wrong user name or password.")
    expect(page.locator("#user")).to_have_value("pam")  # the name stays, the password not
    expect(page.locator("#password")).to_have_value("")
    expect(page.get_by_test_id("who")).to_have_count(0)
    # A user who does not exist reads the same.
    page.fill("#user", "nobody-at-all")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.get_by_test_id("login-error")).to_have_text("Wrong user name or password.")

    page.fill("#user", "pam")
    page.fill("#password", PASSWORD)
    screenshot(page, "login-password")
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/ui/jobs$"))
    expect(page.get_by_test_id("who")).to_have_text("pam")


def test_a_one_time_link_signs_in_once(
    server: ServerProcess, browser: Browser, visits: dict[str, Visits]
) -> None:
    url = _link(server, _user_token(server, "lin"))
    page = _visit(visits, browser, server)
    page.goto(url)
    # Opening the link asks first; the button signs in.
    expect(page.get_by_test_id("link-offer")).to_contain_text("lin")
    expect(page.get_by_test_id("who")).to_have_count(0)
    screenshot(page, "login-link")
    page.get_by_test_id("use-link").click()
    expect(page).to_have_url(re.compile(r"/ui/cluster$"))
    expect(page.get_by_test_id("who")).to_have_text("lin")

    # The same link in another browser: already used.
    other = _visit(visits, browser, server)
    other.goto(url)
    expect(other.get_by_test_id("login-error")).to_contain_text("already used")
    expect(other.get_by_test_id("use-link")).to_have_count(0)
    other.goto(f"{server.url}/ui/jobs")
    expect(other).to_have_url(re.compile(r"/ui/login"))

    # Two browsers that both opened a fresh link before either used it: one gets in.
    url = _link(server, _user_token(server, "lin"))
    first, second = _visit(visits, browser, server), _visit(visits, browser, server)
    first.goto(url)
    second.goto(url)
    first.get_by_test_id("use-link").click()
    expect(first.get_by_test_id("who")).to_have_text("lin")
    second.get_by_test_id("use-link").click()
    expect(second.get_by_test_id("login-error")).to_contain_text("already used")
    expect(second.get_by_test_id("who")).to_have_count(0)


def test_an_expired_link_is_refused(
    brief_links: ServerProcess, browser: Browser, visits: dict[str, Visits]
) -> None:
    url = _link(brief_links, _user_token(brief_links, "exa"))
    wait_until(
        lambda: httpx.get(url, timeout=30).text,
        30,
        "the link to expire",
        until=lambda text: "expired" in text,
    )
    page = _visit(visits, browser, brief_links)
    page.goto(url)
    expect(page.get_by_test_id("login-error")).to_contain_text("This sign-in link expired at")
    expect(page.get_by_test_id("login-error")).to_contain_text("schedulearn web-login")
    expect(page.get_by_test_id("use-link")).to_have_count(0)
    expect(page.get_by_test_id("who")).to_have_count(0)


def test_the_submit_form_sets_time_limit_dependency_and_array(
    server: ServerProcess, browser: Browser, visits: dict[str, Visits]
) -> None:
    token = _user_token(server, "fay")
    with _api(server, token) as api:
        made = api.post("/jobs", json={"command": "true", "gpus": 0})
        assert made.status_code == 201, made.text
        before = made.json()["ids"][0]
    page = _visit(visits, browser, server)
    page.goto(f"{server.url}/ui/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.goto(f"{server.url}/ui/submit")

    # Bad values are shown beside their fields, all at once.
    page.fill("#f-command", "python train.py")
    page.fill("#f-gpus", "0")
    page.fill("#f-time_limit", "forever")
    page.fill("#f-array", "9-2")
    page.fill("#f-dependency", "after:1")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("error-time_limit")).to_contain_text("not a duration")
    expect(page.get_by_test_id("error-array")).to_contain_text("write FIRST-LAST")
    expect(page.get_by_test_id("error-dependency")).to_contain_text("not a dependency kind")
    screenshot(page, "submit-options")

    page.fill("#f-time_limit", "4h")
    page.fill("#f-array", "0-2%1")
    page.fill("#f-dependency", f"afterany:{before}")
    page.fill("#f-model", "bert")
    page.fill("#f-max_restarts", "1")
    page.fill("#f-count", "1")
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    with _api(server) as api:
        job = api.get(f"/jobs/{job_id}").json()
    assert job["user"] == "fay" and job["model"] == "bert" and job["max_restarts"] == 1
    assert job["time_limit"] == 4 * 3600 and job["dependency"] == f"afterany:{before}"
    assert (job["array_index"], job["array_size"], job["array_limit"]) == (0, 3, 1)
