"""Crash tests: SIGKILL the server under load, SIGKILL an agent."""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest
from e2e_cluster import ADMIN, Cluster

from schedulearn.protocol import JobSpec
from waiting import wait_until

pytestmark = pytest.mark.slow


def test_server_killed_under_load_keeps_every_accepted_job(cluster: Cluster) -> None:
    accepted: list[int] = []
    refused = 0
    stop = threading.Event()

    def submitter() -> None:
        nonlocal refused
        headers = {"Authorization": f"Bearer {ADMIN}"}
        body = {"command": "echo hi; sleep 0.2", "gpus": 1}
        with httpx.Client(base_url=cluster.server.url, headers=headers, timeout=5) as http:
            while not stop.is_set() and len(accepted) < 150:
                try:
                    r = http.post("/api/v1/jobs", json=body)
                except httpx.HTTPError:
                    refused += 1
                    time.sleep(0.05)
                    continue
                if r.status_code == 201:
                    accepted.extend(r.json()["ids"])
                time.sleep(0.01)

    thread = threading.Thread(target=submitter)
    thread.start()
    wait_until(lambda: len(accepted), 60, "60 accepted submissions", until=lambda n: n >= 60)
    cluster.server.kill()  # SIGKILL: no shutdown code runs
    killed_at = len(accepted)
    time.sleep(1.0)
    cluster.restart_server()  # same database, same port
    thread.join(timeout=120)
    stop.set()
    assert refused > 0, "the submitter never saw the server down"
    assert len(accepted) > killed_at
    jobs = cluster.wait_final(accepted, timeout=180)
    assert len(jobs) == len(accepted)  # every accepted job is still there
    assert {j.state for j in jobs.values()} == {"succeeded"}, {
        i: (j.state, j.message) for i, j in jobs.items() if j.state != "succeeded"
    }


def test_agent_killed_its_jobs_are_lost_requeued_and_gpus_freed(cluster: Cluster) -> None:
    with cluster.client() as c:
        ids = [
            c.submit(JobSpec(command="echo pid=$$; sleep 120", gpus=4, max_restarts=2)).ids[0]
            for _ in range(2)
        ]
        running = {i: cluster.wait_state(i, {"running"}) for i in ids}
        on_a = next(i for i, j in running.items() if j.placement and "a" in j.placement)
        on_b = next(i for i in ids if i != on_a)
        pid = wait_until(
            lambda: re.search(r"pid=(\d+)", cluster.log_text(on_a)), 10, "the pid of the job on a"
        )
        cluster.pids_to_reap.add(int(pid.group(1)))  # the orphan outlives its agent
        b_pid = wait_until(
            lambda: re.search(r"pid=(\d+)", cluster.log_text(on_b)), 10, "the pid of the job on b"
        )
        cluster.pids_to_reap.add(int(b_pid.group(1)))

        cluster.agents["a"].kill()  # SIGKILL

        # Node a goes silent: marked down, its job lost and requeued, its GPUs freed.
        wait_until(
            lambda: [t.to_state for t in c.history(on_a).transitions],
            30,
            f"job {on_a} lost",
            until=lambda states: "lost" in states,
        )
        assert c.job(on_a).restarts == 0  # its node went down: not the job's restart
        states = [t.to_state for t in c.history(on_a).transitions]
        assert states[:4] == ["assigned", "running", "lost", "pending"], states
        lost = next(t for t in c.history(on_a).transitions if t.to_state == "lost")
        assert "node a stopped answering" in lost.message
        nodes = {n.name: n for n in c.nodes().items}
        assert not nodes["a"].healthy
        assert all(g.job_id is None for g in nodes["a"].gpus)
        # It waits for room (b is busy), then runs on b once b's job is cancelled.
        assert c.job(on_a).state == "pending"
        assert "every node" not in (c.job(on_a).waiting_reason or "")
        c.cancel(on_b)
        moved = cluster.wait_state(on_a, {"running"}, timeout=30)
        assert moved.placement == {"b": [0, 1, 2, 3]} and moved.attempt == 2
        c.cancel(on_a)
