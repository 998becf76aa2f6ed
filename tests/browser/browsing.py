"""Helpers of the browser tests: the running cluster (server and agents as
processes, spoken to over the API), a signed-in browser page that records
every URL it requests, and screenshots.

Screenshots go to out/screenshots/ (ignored by git) so a test run leaves
the tree clean; `SCHEDULEARN_SCREENSHOT_DIR=docs/screenshots` refreshes the
ones the README shows.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from schedulearn.cli.localcluster import AgentProcess, ServerProcess
from waiting import wait_until

if TYPE_CHECKING:
    # Only for types: a run without Playwright still imports this module.
    from playwright.sync_api import Browser, Page, ViewportSize

CHROMIUM = os.environ.get("SCHEDULEARN_CHROMIUM", "/usr/bin/chromium")
_REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = _REPO / os.environ.get("SCHEDULEARN_SCREENSHOT_DIR", "out/screenshots")
ADMIN = "browser-admin-token"
AGENT = "browser-agent-token"
VIEWPORT: ViewportSize = {"width": 1440, "height": 900}
PHONE: ViewportSize = {"width": 390, "height": 844}  # an iPhone 12-14's CSS pixels


@dataclass
class Cluster:
    """The running server and agents, with helpers that use the API directly."""

    server: ServerProcess
    agents: dict[str, AgentProcess]
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url

    def api(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token or ADMIN}"},
            timeout=10,
        )

    def token_for(self, user: str, role: str = "user") -> str:
        if user not in self.tokens:
            with self.api() as api:
                reply = api.post("/api/v1/tokens", json={"user": user, "role": role})
                reply.raise_for_status()
                self.tokens[user] = reply.json()["token"]
        return self.tokens[user]

    def submit(self, user: str, **spec: object) -> int:
        with self.api(self.token_for(user)) as api:
            reply = api.post("/api/v1/jobs", json=spec)
            assert reply.status_code == 201, reply.text
            return int(reply.json()["ids"][0])

    def job(self, job_id: int) -> dict[str, object]:
        with self.api() as api:
            reply = api.get(f"/api/v1/jobs/{job_id}")
            reply.raise_for_status()
            return dict(reply.json())

    def wait_job(
        self, job_id: int, done: Callable[[dict[str, object]], bool], timeout: float = 30
    ) -> dict[str, object]:
        return wait_until(
            lambda: self.job(job_id), timeout, f"job {job_id} to get there", until=done
        )

    def cancel_all(self) -> None:
        with self.api() as api:
            listing = api.get("/api/v1/jobs", params={"limit": 1000}).json()
            for job in listing["items"]:
                if job["state"] not in ("succeeded", "failed", "cancelled"):
                    api.post(f"/api/v1/jobs/{job['id']}/cancel")

    def nodes(self) -> list[dict[str, Any]]:
        with self.api() as api:
            return list(api.get("/api/v1/nodes").json()["items"])

    def wait_idle(self, timeout: float = 30) -> None:
        """Until no GPU is held (cancelled jobs take a grace period to stop)."""
        wait_until(
            self.nodes,
            timeout,
            "every GPU to be free",
            until=lambda nodes: all(g["job_id"] is None for n in nodes for g in n["gpus"]),
        )

    def wait_node_down(self, name: str, timeout: float = 30) -> None:
        wait_until(
            self.nodes,
            timeout,
            f"node {name} to be marked down",
            until=lambda nodes: any(n["name"] == name and not n["healthy"] for n in nodes),
        )

    def wait_nodes(self, count: int, timeout: float = 30) -> None:
        wait_until(
            self.nodes,
            timeout,
            f"{count} healthy nodes",
            until=lambda nodes: sum(1 for n in nodes if n["healthy"]) >= count,
        )


@dataclass
class Visitor:
    """A signed-in browser page, and every URL its context requested."""

    page: Page
    requested: list[str]
    failed: list[str]
    script_errors: list[str]


def open_visitor(
    browser: Browser, base_url: str, token: str | None, viewport: ViewportSize | None = None
) -> Visitor:
    context = browser.new_context(
        viewport=viewport or VIEWPORT, locale="en-GB", accept_downloads=True
    )
    context.set_default_timeout(15_000)
    requested: list[str] = []
    failed: list[str] = []
    context.on("request", lambda request: requested.append(request.url))
    context.on(
        "response",
        lambda response: (
            failed.append(f"{response.status} {response.url}")
            if response.status >= 400 and "/ui/static/" in response.url
            else None
        ),
    )
    page = context.new_page()
    # Uncaught script errors, and anything the Content-Security-Policy blocked.
    script_errors: list[str] = []
    page.on("pageerror", lambda exc: script_errors.append(f"uncaught: {exc}"))
    page.on(
        "console",
        lambda msg: (
            script_errors.append(f"console: {msg.text}")
            if msg.type == "error" and "Content Security Policy" in msg.text
            else None
        ),
    )
    if token is not None:
        page.goto(f"{base_url}/ui/login")
        page.fill("#token", token)
        page.click("button[type=submit]")
        page.wait_for_url("**/ui/cluster")
    return Visitor(page, requested, failed, script_errors)


def assert_only_server(visitor: Visitor, base_url: str) -> None:
    """Every request went to the server itself (no CDN, no font host, nothing else)."""
    server = urlsplit(base_url).netloc
    foreign = [
        url
        for url in visitor.requested
        if urlsplit(url).scheme in ("http", "https", "ws", "wss") and urlsplit(url).netloc != server
    ]
    assert not foreign, f"pages requested other hosts: {foreign}"
    assert not visitor.failed, f"static assets failed to load: {visitor.failed}"
    assert not visitor.script_errors, f"scripts failed on the pages: {visitor.script_errors}"


class Visits:
    """Opens browser contexts on one server; each checks, at the end, that its
    pages requested nothing from any other host."""

    def __init__(self, browser: Browser, base_url: str) -> None:
        self.browser = browser
        self.base_url = base_url
        self.opened: list[Visitor] = []

    def __call__(self, token: str | None, viewport: ViewportSize | None = None) -> Visitor:
        visitor = open_visitor(self.browser, self.base_url, token, viewport)
        self.opened.append(visitor)
        return visitor

    def close_and_check(self) -> None:
        for visitor in self.opened:
            visitor.page.context.close()
        for visitor in self.opened:
            assert_only_server(visitor, self.base_url)


def screenshot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
