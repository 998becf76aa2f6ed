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
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from browsing import ADMIN, AGENT, CHROMIUM, Cluster, Visitor, assert_only_server, open_visitor

from schedulearn.cli.localcluster import AgentProcess, ServerProcess


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium is not installed at {CHROMIUM}: apt-get install -y chromium")
    return CHROMIUM


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
        name: AgentProcess(
            server.url, AGENT, name, gpus, work / f"{name}.log", work / f"{name}-state"
        )
        for name, gpus in (("gpu-node-a", 4), ("gpu-node-b", 4), ("gpu-node-c", 2))
    }
    server.start()
    try:
        server.wait_ready()
        for agent in agents.values():
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


@pytest.fixture(scope="session")
def browser(chromium_path: str) -> Iterator[object]:
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
def visit(browser: object, cluster: Cluster) -> Iterator[Callable[[str | None], Visitor]]:
    """`visit(token)` -> a fresh browser context signed in with `token` (None: not signed in)."""
    opened: list[Visitor] = []

    def open_as(token: str | None) -> Visitor:
        visitor = open_visitor(browser, cluster, token)
        opened.append(visitor)
        return visitor

    yield open_as
    for visitor in opened:
        visitor.page.context.close()  # type: ignore[attr-defined]
    for visitor in opened:
        assert_only_server(visitor, cluster)
