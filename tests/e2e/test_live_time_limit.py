"""Wall-clock limits live (`submit --time`, issue 35): a real server and a real
agent on 127.0.0.1, jobs submitted through the `schedulearn` CLI.

A job that outlasts its limit gets SIGTERM first (it can save and say so),
then SIGKILL when it ignores it, and ends `timeout` with the reason in
`show`, its history and `jobs`; a running job's `show` says how much time it
has left, and its expected run time falls back on the limit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2e_cluster import ADMIN, Cluster, ok, one_node, submitted_id

from waiting import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with one_node(tmp_path_factory.mktemp("time-limit"), gpus=2) as c:
        yield c


def submit(cluster: Cluster, *args: str) -> int:
    return submitted_id(ok(cluster.cli("submit", "--gpus", "1", *args)))


def web_page(cluster: Cluster, path: str) -> str:
    """A web page as a signed-in admin sees it (signed in with the token form)."""
    with httpx.Client(base_url=cluster.server.url, timeout=30) as web:
        nonce = re.search(r'name="nonce" value="([^"]+)"', web.get("/ui/login").text)
        assert nonce
        web.post("/ui/login", data={"token": ADMIN, "nonce": nonce[1], "next": "/ui/jobs"})
        return web.get(path).text


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_job_past_its_limit_gets_sigterm_and_ends_timeout(cluster: Cluster) -> None:
    polite = submit(
        cluster,
        "--time",
        "3",
        "--",
        "trap 'echo saving on SIGTERM; exit 143' TERM; echo started; "
        "while true; do sleep 0.1; done",
    )
    job = cluster.wait_final([polite], timeout=60)[polite]
    assert job.state == "timeout", job
    assert (job.message or "").startswith("stopped at its time limit (3s, --time)"), job.message
    wait_until(
        lambda: cluster.log_text(polite), 20, "the job's output", until=lambda t: "saving" in t
    )
    with cluster.client() as c:
        last = c.history(polite).transitions[-1]
    assert (last.from_state, last.to_state) == ("running", "timeout")
    shown = ok(cluster.cli("show", str(polite))).stdout
    assert "timeout" in shown and "stopped at its time limit" in shown and "3s" in shown
    listing = ok(cluster.cli("jobs", "--state", "timeout")).stdout
    assert re.search(rf"^{polite}\s", listing, re.M), listing
    page = web_page(cluster, f"/ui/jobs/{polite}")
    assert "st-timeout" in page and "stopped at its time limit (3s, --time)" in page


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(
    cluster: Cluster, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    stubborn = submit(
        cluster,
        "--time",
        "2",
        "--",
        f"trap '' TERM; echo $$ > {pid_file}; while true; do sleep 0.1; done",
    )
    assert cluster.wait_final([stubborn], timeout=60)[stubborn].state == "timeout"
    wait_until(pid_file.exists, 20, "the job's pid file")
    pid = int(pid_file.read_text())
    wait_until(lambda: _alive(pid), 30, "the job's process to be killed", until=lambda a: not a)
    # Its GPU is free again: a job needing both starts and ends.
    both = submit(cluster, "--gpus", "2", "--", "echo both")
    assert cluster.wait_final([both])[both].state == "succeeded"


def test_show_gives_the_time_left_and_the_limit_as_the_expected_run_time(
    cluster: Cluster,
) -> None:
    long = submit(cluster, "--time", "1h", "--", "sleep 600")
    cluster.wait_state(long, {"running"})
    try:
        with cluster.client() as c:
            job = c.job(long)
        assert job.time_limit == 3600.0
        assert job.time_left is not None and 0 < job.time_left <= 3600.0
        shown = ok(cluster.cli("show", str(long))).stdout
        assert re.search(r"time left\s+\d+m\d\ds", shown), shown
        assert re.search(r"time limit\s+1h00m", shown), shown
        limit = re.search(
            r'data-testid="time-limit">(.*?)</dd>', web_page(cluster, f"/ui/jobs/{long}")
        )
        assert limit and "left" in limit[1], limit
        running = wait_until(
            lambda: cluster.client().job(long),
            20,
            "the job's expected run time",
            until=lambda j: j.duration_estimate == 3600.0,
        )
        # A job that needs its GPU is predicted to start when the limit ends it.
        behind = submit(cluster, "--gpus", "2", "--", "true")
        waiting = wait_until(
            lambda: cluster.client().job(behind),
            20,
            "a predicted start",
            until=lambda j: j.predicted_start_at is not None,
        )
        assert running.started_at is not None and waiting.predicted_start_at is not None
        assert abs(waiting.predicted_start_at - (running.started_at + 3600.0)) < 60
    finally:
        ok(cluster.cli("cancel", str(long)))
