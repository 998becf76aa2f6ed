"""Fixtures for the browser tests: a real server and real agents on 127.0.0.1,
Debian's Chromium driven by Playwright, and a record of every request a page makes.

The server and the agents are separate processes (`cli.localcluster`), the
same ones `schedulearn server` and `schedulearn agent --gpus N` run; the
browser speaks to them over HTTP like a user's. Chromium is the system
package (`apt-get install chromium`); Playwright never downloads a browser
here. Each browser context records the URLs it requested, and the test
fails if a page asked any host but the server.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from browsing import ADMIN, AGENT, CHROMIUM, Cluster, Visits

from dependencies import Dependency, missing
from schedulearn.cli.localcluster import AgentProcess, ServerProcess

if TYPE_CHECKING:
    from playwright.sync_api import Browser


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not Path(CHROMIUM).exists():
        missing(Dependency.BROWSER, f"no Chromium at {CHROMIUM}")
    return CHROMIUM


def app_loaded(server: ServerProcess, timeout: float = 120.0) -> None:
    """Until the server's app answers (it listens, and answers /healthz, before it has
    loaded its app; on a loaded machine the first API call can wait many seconds)."""
    import httpx

    from waiting import wait_until

    def status() -> int:
        return httpx.get(
            f"{server.url}/api/v1/policy",
            headers={"Authorization": f"Bearer {server.admin_token}"},
            timeout=timeout,
        ).status_code

    wait_until(
        status, timeout, "the server's app to load", until=(200).__eq__, ignore=(httpx.HTTPError,)
    )


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    work = Path(tempfile.mkdtemp(prefix="sl-browser-"))
    server = ServerProcess(
        f"sqlite:///{work / 'schedulearn.db'}",
        work / "server.log",
        ADMIN,
        AGENT,
        env={
            "SCHEDULEARN_HEARTBEAT_SECONDS": "0.5",
            "SCHEDULEARN_NODE_TIMEOUT_SECONDS": "3",
            "SCHEDULEARN_TICK_SECONDS": "0.5",
            "SCHEDULEARN_STOP_GRACE_SECONDS": "1",
        },
    )
    agents = {
        name: AgentProcess(server.url, "", name, gpus, work / f"{name}.log", work / f"{name}-state")
        for name, gpus in (("gpu-node-a", 4), ("gpu-node-b", 4), ("gpu-node-c", 2))
    }
    server.start()
    try:
        server.wait_ready()
        app_loaded(server)
        for agent in agents.values():
            agent.enroll(server)  # each node its own credential
            agent.start()
        running = Cluster(server, agents)
        running.wait_nodes(len(agents))
        yield running
    finally:
        for agent in agents.values():
            agent.stop()
        server.stop()
        if os.environ.get("SCHEDULEARN_KEEP_TEST_LOGS"):
            print(f"browser test logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


# Module scope, not session: Playwright's sync API keeps an asyncio loop
# running on the main thread while it lives, and later test directories call
# asyncio.run(), which refuses to start inside a running loop.
@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=chromium_path,
            args=["--no-sandbox", "--headless", "--disable-gpu"],
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def visit(browser: Browser, cluster: Cluster) -> Iterator[Visits]:
    """`visit(token)` -> a fresh browser context signed in with `token` (None: not signed in)."""
    visits = Visits(browser, cluster.url)
    yield visits
    visits.close_and_check()


@pytest.fixture(scope="session")
def empty_server() -> Iterator[ServerProcess]:
    """A server no agent has joined and no job was submitted to."""
    work = Path(tempfile.mkdtemp(prefix="sl-browser-empty-"))
    server = ServerProcess(
        f"sqlite:///{work / 'schedulearn.db'}", work / "server.log", ADMIN, AGENT
    )
    server.start()
    try:
        server.wait_ready()
        app_loaded(server)
        yield server
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def visit_empty(browser: Browser, empty_server: ServerProcess) -> Iterator[Visits]:
    visits = Visits(browser, empty_server.url)
    yield visits
    visits.close_and_check()
