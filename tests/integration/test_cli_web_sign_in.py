"""Signing in to the web without a token, from the command line, against a real server
process: `schedulearn user passwd` sets a password the sign-in form then takes (and a
wrong one, or an unknown user, gets the same refusal; repeated failures are held off),
`schedulearn web-login` prints a link that signs in once; and `submit`'s flags for
every job option reach the stored job."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from schedulearn.cli.localcluster import ServerProcess

ADMIN = "cli-sign-in-admin"
PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("cli-sign-in")
    proc = ServerProcess(f"sqlite:///{work / 'x.db'}", work / "server.log", ADMIN, "cli-agent")
    proc.start()
    try:
        proc.wait_ready(timeout=90)
        yield proc
    finally:
        proc.stop()


def cli(
    server: ServerProcess, token: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    env.update(SCHEDULEARN_SERVER=server.url, SCHEDULEARN_TOKEN=token, COLUMNS="200")
    env["SCHEDULEARN_CONFIG"] = str(Path(server.log_path).parent / "no-config.json")
    return subprocess.run(
        [sys.executable, "-m", "schedulearn.cli.main", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def user_token(server: ServerProcess, name: str) -> str:
    made = cli(server, ADMIN, "token", "create", "--user", name)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def _nonce(browser: httpx.Client, path: str = "/ui/login") -> str:
    page = browser.get(path)
    assert page.status_code == 200, page.text
    found = re.search(r'name="nonce" value="([^"]+)"', page.text)
    assert found is not None
    return found[1]


def sign_in(server: ServerProcess, **form: str) -> tuple[httpx.Response, httpx.Client]:
    """POST the sign-in form as a browser would (nonce cookie first); the browser too."""
    browser = httpx.Client(base_url=server.url, timeout=30)
    nonce = _nonce(browser)
    reply = browser.post("/ui/login", data={"nonce": nonce, "next": "/ui/jobs", **form})
    return reply, browser


def signed_in_as(browser: httpx.Client) -> str | None:
    page = browser.get("/ui/jobs")
    found = re.search(r'data-testid="who"[^>]*>([^<]+)<', page.text)
    return found[1].strip() if page.status_code == 200 and found else None


def test_a_password_set_with_user_passwd_signs_in_to_the_web(server: ServerProcess) -> None:
    assert cli(server, ADMIN, "user", "add", "alice").returncode == 0
    alice = user_token(server, "alice")
    short = cli(server, alice, "user", "passwd", "--stdin", stdin="short\n")
    assert short.returncode == 2 and "give at least 10" in short.stderr, short.stderr
    # Not from a pipe without --stdin: it would be read off a terminal.
    no_tty = cli(server, alice, "user", "passwd", stdin=PASSWORD + "\n")
    assert no_tty.returncode == 2 and "--stdin" in no_tty.stderr, no_tty.stderr

    done = cli(server, alice, "user", "passwd", "--stdin", stdin=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr
    assert "password set for alice: the web pages sign them in as user" in done.stdout
    others = cli(server, alice, "user", "passwd", "root", "--stdin", stdin=PASSWORD + "\n")
    assert others.returncode == 1 and "only your own password" in others.stderr

    reply, browser = sign_in(server, user="alice", password=PASSWORD)
    assert reply.status_code == 303 and reply.headers["location"] == "/ui/jobs", reply.text
    assert signed_in_as(browser) == "alice"
    # The session holds a token of its own, which `token list` shows...
    tokens = json.loads(cli(server, alice, "token", "list", "--json").stdout)["items"]
    assert [t["name"] for t in tokens if t["state"] == "active"] == ["", "web sign-in"]
    # ... and signing out revokes it with the session.
    page = browser.get("/ui/jobs").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    assert browser.post("/ui/logout", data={"csrf": csrf[1]}).status_code == 303
    assert signed_in_as(browser) is None
    tokens = json.loads(cli(server, alice, "token", "list", "--all", "--json").stdout)["items"]
    assert [t["state"] for t in tokens if t["name"] == "web sign-in"] == ["revoked"]


def test_a_wrong_password_and_an_unknown_user_get_the_same_refusal(
    server: ServerProcess,
) -> None:
    assert cli(server, ADMIN, "user", "add", "dora").returncode == 0
    set_it = cli(server, ADMIN, "user", "passwd", "dora", "--stdin", stdin=PASSWORD + "\n")
    assert set_it.returncode == 0 and "sign them in as user" in set_it.stdout, set_it.stderr
    wrong, browser = sign_in(server, user="dora", password=PASSWORD + "!")
    nobody, _ = sign_in(server, user="nobody-here", password=PASSWORD)
    for reply in (wrong, nobody):
        assert reply.status_code == 401
        assert "Wrong user name or password." in reply.text
    assert signed_in_as(browser) is None
    # An admin's password for someone else signs them in as a user, not as admin.
    right, browser = sign_in(server, user="dora", password=PASSWORD)
    assert right.status_code == 303 and signed_in_as(browser) == "dora"
    listed = cli(server, ADMIN, "token", "list", "--user", "dora", "--json")
    assert [t["role"] for t in json.loads(listed.stdout)["items"]] == ["user"]
    # An admin's own password signs them in as admin.
    own = cli(server, ADMIN, "user", "passwd", "--stdin", stdin=PASSWORD + "\n")
    assert "password set for admin: the web pages sign them in as admin" in own.stdout, own


def test_repeated_failures_hold_off_even_the_right_password(server: ServerProcess) -> None:
    assert cli(server, ADMIN, "user", "add", "carl").returncode == 0
    set_it = cli(server, ADMIN, "user", "passwd", "carl", "--stdin", stdin=PASSWORD + "\n")
    assert set_it.returncode == 0, set_it.stderr
    for _ in range(5):
        wrong, _browser = sign_in(server, user="carl", password="not the password")
        assert wrong.status_code == 401
    held, browser = sign_in(server, user="carl", password=PASSWORD)
    assert held.status_code == 429 and "Too many failed sign-ins for carl" in held.text
    assert signed_in_as(browser) is None
    # Another name from the same address is not held off.
    assert cli(server, ADMIN, "user", "add", "erin").returncode == 0
    set_it = cli(server, ADMIN, "user", "passwd", "erin", "--stdin", stdin=PASSWORD + "\n")
    assert set_it.returncode == 0, set_it.stderr
    erin, browser = sign_in(server, user="erin", password=PASSWORD)
    assert erin.status_code == 303 and signed_in_as(browser) == "erin"


def test_web_login_prints_a_link_that_signs_in_once(server: ServerProcess) -> None:
    assert cli(server, ADMIN, "user", "add", "lena").returncode == 0
    lena = user_token(server, "lena")
    made = cli(server, lena, "web-login")
    assert made.returncode == 0, made.stderr
    url = made.stdout.strip()
    assert url.startswith(f"{server.url}/ui/login?code="), url
    assert "signs a browser in as lena (user); works once" in made.stderr
    assert lena not in made.stdout + made.stderr

    browser = httpx.Client(timeout=30)
    offer = browser.get(url)
    # Opening the link only asks; it signs in with the button.
    assert offer.status_code == 200 and "Sign in as lena" in offer.text
    code = url.split("code=", 1)[1]
    nonce = re.search(r'name="nonce" value="([^"]+)"', offer.text)
    assert nonce is not None
    used = browser.post(f"{server.url}/ui/login", data={"nonce": nonce[1], "code": code})
    assert used.status_code == 303, used.text
    page = browser.get(f"{server.url}/ui/jobs")
    assert re.search(r'data-testid="who"[^>]*>lena<', page.text), page.text

    again = httpx.Client(timeout=30)
    second = again.get(url)
    assert second.status_code == 400 and "already used" in second.text
    nonce = re.search(r'name="nonce" value="([^"]+)"', second.text)
    assert nonce is not None
    replay = again.post(f"{server.url}/ui/login", data={"nonce": nonce[1], "code": code})
    assert replay.status_code == 400 and "already used" in replay.text
    assert again.get(f"{server.url}/ui/jobs", follow_redirects=False).status_code != 200

    # Revoking the token that made a link ends the link too.
    spare = cli(server, lena, "web-login", "--json")
    link = json.loads(spare.stdout)
    assert link["url"].endswith(link["path"]) and link["user"] == "lena"
    ids = json.loads(cli(server, ADMIN, "token", "list", "--user", "lena", "--json").stdout)
    for token in ids["items"]:
        assert cli(server, ADMIN, "token", "revoke", str(token["id"])).returncode == 0
    refused = httpx.get(link["url"], timeout=30)
    assert refused.status_code == 400 and "revoked" in refused.text


def test_submit_flags_for_every_option_reach_the_job(server: ServerProcess) -> None:
    first = cli(server, ADMIN, "submit", "--gpus", "0", "--json", "--", "true")
    assert first.returncode == 0, first.stderr
    after = json.loads(first.stdout)["ids"][0]
    done = cli(
        server,
        ADMIN,
        "submit",
        *("--min-gpus", "1", "--max-gpus", "2", "--model", "resnet50"),
        *("--deadline", "2030-06-01T18:00:00+00:00", "--shm-size", "8g"),
        *("--max-restarts", "5", "--time", "2h", "--dependency", f"afterany:{after}"),
        *("--array", "3-4%1", "--json", "--", "python", "train.py"),
    )
    assert done.returncode == 0, done.stderr
    job_id = json.loads(done.stdout)["ids"][0]
    job = json.loads(cli(server, ADMIN, "show", str(job_id), "--json").stdout)
    assert (job["min_gpus"], job["max_gpus"], job["model"]) == (1, 2, "resnet50")
    assert job["deadline"] == datetime(2030, 6, 1, 18, tzinfo=UTC).timestamp()
    assert job["shm_size"] == "8g"
    assert (job["max_restarts"], job["time_limit"]) == (5, 7200.0)
    assert job["dependency"] == f"afterany:{after}"
    assert (job["array_index"], job["array_size"], job["array_limit"]) == (3, 2, 1)
    # A bad value is refused before sending, naming the flag.
    bad = cli(server, ADMIN, "submit", "--min-gpus", "3", "--max-gpus", "2", "--", "true")
    assert bad.returncode == 2 and "min_gpus (3) is above max_gpus (2)" in bad.stderr
    bad = cli(server, ADMIN, "submit", "--max-restarts", "-1", "--", "true")
    assert bad.returncode == 2 and "max_restarts (--max-restarts):" in bad.stderr
