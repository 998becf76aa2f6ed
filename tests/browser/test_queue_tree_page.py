"""The Queues page shows a queue tree (issue 32 item 6), in Chromium: each child
row comes right under its parent, indented, saying whose it is, and the parent
says how much of its guarantee its children are promised. Its own server (no
agent: the page lists queues without nodes)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from browsing import ADMIN, AGENT, Visits, screenshot
from playwright.sync_api import Browser, expect

from schedulearn.cli.localcluster import ServerProcess


@pytest.fixture(scope="module")
def tree_server() -> Iterator[ServerProcess]:
    work = Path(tempfile.mkdtemp(prefix="sl-browser-tree-"))
    server = ServerProcess(
        f"sqlite:///{work / 'schedulearn.db'}", work / "server.log", ADMIN, AGENT
    )
    server.start()
    try:
        server.wait_ready()
        headers = {"Authorization": f"Bearer {ADMIN}"}
        # Names chosen so that name order is not tree order: the children sort
        # before their parent, and a root after it.
        for body in (
            {"name": "alpha", "guaranteed": {"": 2}},
            {"name": "research", "guaranteed": {"": 4}},
            {"name": "ml-vision", "guaranteed": {"": 2}, "parent": "research"},
            {"name": "ml-nlp", "guaranteed": {"": 1}, "parent": "research"},
            {"name": "zeta"},
        ):
            # The first request waits for the app to load (slow on a busy machine).
            made = httpx.post(
                f"{server.url}/api/v1/queues", headers=headers, json=body, timeout=120
            )
            assert made.status_code == 201, made.text
        yield server
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def test_the_queues_page_shows_children_under_their_parent(
    tree_server: ServerProcess, browser: Browser
) -> None:
    visits = Visits(browser, tree_server.url)
    try:
        page = visits(ADMIN).page
        page.goto(f"{tree_server.url}/ui/queues")
        rows = page.locator("[data-testid=queue-row]")
        expect(rows).to_have_count(5)
        order = [rows.nth(i).get_attribute("data-queue") for i in range(5)]
        assert order == ["alpha", "research", "ml-nlp", "ml-vision", "zeta"], order

        parent = page.locator('[data-testid=queue-row][data-queue="research"]')
        child = page.locator('[data-testid=queue-row][data-queue="ml-vision"]')
        expect(child).to_have_attribute("data-parent", "research")
        expect(child).to_contain_text("in research")
        expect(parent).not_to_have_attribute("data-parent", "research")
        expect(parent.get_by_test_id("to-children")).to_have_text("(3 to its children)")
        # Its line speaks of its own jobs: its children's 3 GPUs are not theirs.
        expect(page.get_by_test_id("summary").nth(1)).to_have_text(
            "research's own jobs use 0 of the 1 GPUs its guarantee leaves them "
            "(3 are promised to its children)"
        )
        # Indented: the child's name starts to the right of its parent's.
        at_parent = parent.locator("strong").bounding_box()
        at_child = child.locator("strong").bounding_box()
        assert at_parent is not None and at_child is not None
        assert at_child["x"] > at_parent["x"] + 8, (at_parent, at_child)
        # The total promised counts root queues only: 2 + 4, not 2 + 4 + 2 + 1.
        expect(page.get_by_test_id("promised")).to_contain_text("Queues promise 6 of")
        screenshot(page, "queue-tree")
    finally:
        visits.close_and_check()
