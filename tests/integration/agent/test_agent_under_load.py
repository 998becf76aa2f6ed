"""An agent under load: a 1,000-job `gpus: 0` array on one 2-CPU agent.

Real server and agent processes on 127.0.0.1. Jobs without GPUs take one
CPU slot each, so the node runs two at a time (never the whole array at
once); starts pass the agent's start gate, and heartbeats go out from
their own thread. Every job succeeds and the node is never marked down.
"""

from __future__ import annotations

import os
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
    # `true`: the shortest real job; what is under load here is the agent and
    # the server (starts, exits, heartbeats), not what each job runs.
    r = api.http.post("/jobs", json={"command": ["true"], "gpus": 0, "count": COUNT})
    assert r.status_code in (200, 201), r.text
    ids: list[int] = r.json()["ids"]
    assert len(ids) == COUNT

    def count(*states: str) -> int:
        # `total` of a one-item page: the server counts, nothing is listed.
        r = api.http.get("/jobs", params={"state": states, "limit": 1}, timeout=60)
        assert r.status_code == 200, r.text
        return int(r.json()["total"])

    def finished() -> int:
        node = api.node("n1")
        assert node is not None and node["healthy"], f"node n1 was marked down: {node}"
        bad = count("failed", "cancelled", "lost")
        assert not bad, f"{bad} jobs did not succeed"
        # Sampled as it goes (assigned counts: the slot is held from then on);
        # the runs' own times below cover every moment.
        assert count("assigned", "running") <= 2
        return count("succeeded")

    # Polled once a second: listing all 1,000 jobs (each with its prediction)
    # every 50 ms kept the server busier than the jobs did.
    wait_until(
        finished, 1700, f"all {COUNT} jobs to succeed", until=lambda n: n == COUNT, every=1.0
    )
    wanted = set(ids)
    jobs = []
    for offset in range(0, COUNT, 1000):
        r = api.http.get("/jobs", params={"limit": 1000, "offset": offset}, timeout=60)
        assert r.status_code == 200, r.text
        jobs += [j for j in r.json()["items"] if j["id"] in wanted]
    assert len(jobs) == COUNT and all(j["state"] == "succeeded" for j in jobs)
    unstamped = [j for j in jobs if j["started_at"] is None or j["ended_at"] is None]
    assert not unstamped, f"{len(unstamped)} finished jobs lack a start or end, e.g. {unstamped[0]}"
    # Two CPU slots: never more than two of them ran at once, at any moment
    # (a job's run is [started_at, ended_at]; at a tie the end comes first).
    edges = sorted(
        [(j["started_at"], 1) for j in jobs] + [(j["ended_at"], -1) for j in jobs],
        key=lambda edge: (edge[0], edge[1]),
    )
    at_once, most_at_once = 0, 0
    for _, step in edges:
        at_once += step
        most_at_once = max(most_at_once, at_once)
    assert most_at_once <= 2
    # No job was ever requeued: not lost to a node marked down, not restarted.
    for job_id in ids[:: max(1, COUNT // 50)]:
        job = api.job(job_id)
        assert job["restarts"] == 0 and job["attempt"] == 1, job
        history = api.http.get(f"/jobs/{job_id}/history").json()["transitions"]
        assert not [t for t in history if t["to_state"] == "lost"], history
