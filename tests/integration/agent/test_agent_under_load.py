"""An agent under load: a 1,000-job `gpus: 0` array on one 2-CPU agent.

Real server and agent processes on 127.0.0.1. Jobs without GPUs take one
CPU slot each, so the node runs two at a time (never the whole array at
once); starts pass the agent's start gate, and heartbeats go out from
their own thread. Every job succeeds and the node is never marked down.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx
import pytest
from agent_support import AdminApi, ServerProc, StartAgent

from waiting import wait_until

COUNT = int(os.environ.get("SCHEDULEARN_TEST_ARRAY_SIZE", "1000"))


def app_loaded(api: AdminApi) -> None:
    wait_until(
        lambda: api.http.get("/nodes", timeout=60).status_code == 200,
        120,
        "the server's API to answer",
        ignore=(httpx.HTTPError,),
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_thousand_cpu_jobs_on_a_two_cpu_agent_all_succeed(
    server: ServerProc, api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    app_loaded(api)
    start_agent("n1", gpus=0, extra=("--cpus", "2"))
    wait_until(lambda: api.node("n1"), 60, "node n1 to register")
    r = api.http.post(
        "/jobs", json={"command": [sys.executable, "-c", "pass"], "gpus": 0, "count": COUNT}
    )
    assert r.status_code in (200, 201), r.text
    ids: list[int] = r.json()["ids"]
    assert len(ids) == COUNT

    wanted = set(ids)
    most_running = 0

    def finished() -> int:
        nonlocal most_running
        node = api.node("n1")
        assert node is not None and node["healthy"], f"node n1 was marked down: {node}"
        jobs = []
        for offset in range(0, COUNT, 1000):
            r = api.http.get("/jobs", params={"limit": 1000, "offset": offset}, timeout=60)
            assert r.status_code == 200, r.text
            jobs += [j for j in r.json()["items"] if j["id"] in wanted]
        running = sum(j["state"] in ("assigned", "running") for j in jobs)
        most_running = max(most_running, running)
        bad = [j for j in jobs if j["state"] in ("failed", "cancelled", "lost")]
        assert not bad, f"{len(bad)} jobs did not succeed, e.g. {bad[0]}"
        return sum(j["state"] == "succeeded" for j in jobs)

    wait_until(finished, 1700, f"all {COUNT} jobs to succeed", until=lambda n: n == COUNT)
    # Two CPU slots: never more than two of them held the node at once.
    assert most_running <= 2
    # No job was ever requeued: not lost to a node marked down, not restarted.
    for job_id in ids[:: max(1, COUNT // 50)]:
        job = api.job(job_id)
        assert job["restarts"] == 0 and job["attempt"] == 1, job
        history = api.http.get(f"/jobs/{job_id}/history").json()["transitions"]
        assert not [t for t in history if t["to_state"] == "lost"], history
