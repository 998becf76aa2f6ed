"""The Queues page in Chromium (issue 12): each queue's GPUs in use, guarantee and
fair share, the "team-a uses 4 of its 2 guaranteed GPUs" line, its use over time
as a chart, and the same reason on the Queue page for a job its queue holds
back. Its own server and agent (the shared browser cluster has no queues)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from browsing import ADMIN, AGENT, Cluster, Visits, screenshot
from playwright.sync_api import Browser, expect

from schedulearn.cli.localcluster import AgentProcess, ServerProcess


@pytest.fixture(scope="module")
def teams() -> Iterator[Cluster]:
    """A server with two queues guaranteed 2 GPUs each and one 4-GPU agent. The
    fair-share minimum run time stays at its default (300 s), so nothing is
    taken back while the test looks."""
    work = Path(tempfile.mkdtemp(prefix="sl-browser-queues-"))
    server = ServerProcess(
        f"sqlite:///{work / 'schedulearn.db'}",
        work / "server.log",
        ADMIN,
        AGENT,
        env={"SCHEDULEARN_TICK_SECONDS": "0.5", "SCHEDULEARN_STOP_GRACE_SECONDS": "1"},
    )
    agent = AgentProcess(server.url, "", "gpu4", 4, work / "gpu4.log", work / "gpu4-state")
    server.start()
    try:
        server.wait_ready()
        running = Cluster(server, {"gpu4": agent})
        with running.api() as api:
            api.timeout = 120  # the first request waits for the app to load
            for name, user in (("team-a", "ana"), ("team-b", "bob")):
                made = api.post(
                    "/api/v1/queues",
                    json={"name": name, "guaranteed": {"": 2}, "default_for": [user]},
                )
                assert made.status_code == 201, made.text
        agent.enroll(server)
        agent.start()
        running.wait_nodes(1)
        yield running
    finally:
        agent.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def test_the_queues_page_shows_use_guarantee_and_share_over_time(
    teams: Cluster, browser: Browser
) -> None:
    spec = {"command": "sleep 600", "gpus": 1, "preemptible": True}
    held = [teams.submit("ana", name=f"a{i}", **spec) for i in range(4)]  # her default: team-a
    for job_id in held:
        teams.wait_job(job_id, lambda j: j["state"] == "running")
    waiting_b = teams.submit("bob", name="b0", **spec)
    waiting_a = teams.submit("ana", name="a4", **spec)
    visits = Visits(browser, teams.url)
    try:
        page = visits(teams.token_for("ana")).page
        page.goto(f"{teams.url}/ui/queues")
        row_a = page.locator('[data-testid=queue-row][data-queue="team-a"]')
        row_b = page.locator('[data-testid=queue-row][data-queue="team-b"]')
        expect(row_a.get_by_test_id("used")).to_have_text("4")
        expect(row_a.get_by_test_id("guaranteed")).to_have_text("2")
        expect(row_b.get_by_test_id("used")).to_have_text("0")
        expect(row_b).to_contain_text("1 job (1 GPU)")
        expect(page.get_by_test_id("summary").first).to_have_text(
            "team-a uses 4 of its 2 guaranteed GPUs"
        )
        expect(page.get_by_test_id("over-guarantee")).to_contain_text(
            "team-a uses 4 of its 2 guaranteed GPUs"
        )
        # What the queues promise together, against the cluster (issue 32).
        expect(page.get_by_test_id("promised")).to_have_text(
            "Queues promise 4 of the cluster's 4 GPUs."
        )
        # The chart: step lines per queue; team-a's GPUs in use rise from 0 to 4.
        line_a = page.locator(
            '[data-testid=share-chart] polyline[data-queue="team-a"][data-line="used"]'
        )
        expect(line_a).to_have_count(1)
        ys = [float(p.split(",")[1]) for p in (line_a.get_attribute("points") or "").split()]
        assert min(ys) < max(ys), ys  # it rose: 4 GPUs is the top edge, 0 the bottom
        assert min(ys) == 0.0
        line_b = page.locator('[data-testid=share-chart] polyline[data-queue="team-b"]')
        expect(line_b).to_have_count(2)  # GPUs in use, and fair share
        share_a = page.locator(
            '[data-testid=share-chart] polyline[data-queue="team-a"][data-line="share"]'
        )
        expect(share_a).to_have_count(1)
        screenshot(page, "queues")

        # The Queue page tells ana why her fifth job waits: her queue's account.
        page.goto(f"{teams.url}/ui/queue")
        row = page.locator(f'[data-testid=queue-row][data-job="{waiting_a}"]')
        expect(row).to_contain_text("team-a uses 4 of its 2 guaranteed GPUs")
        expect(page.locator(f'[data-testid=queue-row][data-job="{waiting_b}"]')).to_be_visible()

        # And `schedulearn show` says the same.
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
        env.update(
            SCHEDULEARN_SERVER=teams.url,
            SCHEDULEARN_TOKEN=teams.token_for("ana"),
            SCHEDULEARN_CONFIG=str(Path(teams.server.log_path).parent / "no-config.json"),
            COLUMNS="250",
        )
        shown = subprocess.run(
            [sys.executable, "-m", "schedulearn.cli.main", "show", str(waiting_a)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.returncode == 0, shown.stderr
        assert "team-a uses 4 of its 2 guaranteed GPUs" in shown.stdout, shown.stdout
        assert re.search(r"(?m)^\s*queue\s+team-a\s*$", shown.stdout), shown.stdout
    finally:
        visits.close_and_check()
        teams.cancel_all()


def test_with_no_queue_the_page_says_how_to_add_one(visit_empty: Visits) -> None:
    base = visit_empty.base_url
    # The first request waits for the server's app to load (slow on a busy machine).
    headers = {"Authorization": f"Bearer {ADMIN}"}
    httpx.get(f"{base}/api/v1/queues", headers=headers, timeout=120).raise_for_status()
    visitor = visit_empty(ADMIN)
    visitor.page.goto(f"{base}/ui/queues")
    expect(visitor.page.get_by_test_id("queues-empty")).to_contain_text("schedulearn queue add")
