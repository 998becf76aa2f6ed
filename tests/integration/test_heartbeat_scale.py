"""Heartbeats under load and at scale (issue 36, item 1), against a real
`schedulearn server` process on 127.0.0.1, on SQLite and PostgreSQL.

- A heartbeat that its agent built before it received a run, and that the
  server recorded more than the report grace later (as a saturated server
  does), no longer loses that run: the heartbeat says which work batch its
  agent had acted on (`Heartbeat.work_through`). A heartbeat built after
  that batch which leaves the run out still loses it, and an agent that
  says nothing is judged as before (tests/integration/test_clock_driven.py).
- The server stretches the heartbeat interval, the lease and the node
  timeout with the number of healthy nodes (`max_heartbeats_per_second`).

The late heartbeat is played by the test, as bench/scale.py's agents met
it: built, held while the grace runs out, then sent.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from served import Served, ServedApi, served_api
from wire_agent import WireAgent

from schedulearn.protocol import (
    Heartbeat,
    HeartbeatReply,
    RunningJobReport,
)
from waiting import wait_until

HEARTBEAT = 1.0
REPORT_GRACE = 5.0  # max(3 x HEARTBEAT, 5): `AgentTiming.report_grace`


def beat(node: WireAgent, running: list[int], work_through: float | None) -> HeartbeatReply:
    """A heartbeat listing `running` (attempt 1 each), echoing `work_through`."""
    body = Heartbeat(
        name=node.name,
        running=[RunningJobReport(job_id=j, attempt=1) for j in running],
        work_through=work_through,
    )
    r = node.api.post(
        "/api/v1/agent/heartbeat", headers=node.headers, json=body.model_dump(mode="json")
    )
    assert r.status_code == 200, r.text
    return HeartbeatReply.model_validate(r.json())


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Any:
    yield from served_api(
        database_url,
        tmp_path / "server.log",
        heartbeat_seconds=str(HEARTBEAT),
        node_timeout_seconds="60",
        # Each heartbeat written before its reply: these tests read what one
        # heartbeat did right after it (the group commit: test_heartbeat_book.py).
        heartbeat_flush_seconds="0",
        tick_seconds="0.2",
    )


def test_a_late_heartbeat_built_before_the_handout_loses_no_run(served: ServedApi) -> None:
    node = WireAgent(served, "n1", gpus=1)
    node.register()
    before = node.work(wait=0)  # the newest batch the agent acts on, for now
    assert before.at is not None and not before.starts
    job_id = served.submit(max_restarts=1)
    # The agent builds a heartbeat (nothing runs yet); the server then hands
    # the job out and the agent starts it, while the heartbeat is on its way.
    work = wait_until(lambda: node.work(wait=2.0), 30, "the job's start", until=lambda b: b.starts)
    assert [s.job_id for s in work.starts] == [job_id]
    node.start(job_id, 1)
    assert served.job(job_id).state == "running"
    # A saturated server records the heartbeat past the report grace.
    time.sleep(REPORT_GRACE + 0.5)
    beat(node, running=[], work_through=before.at)
    kept = served.job(job_id)
    assert (kept.state, kept.attempt, kept.restarts) == ("running", 1, 0), kept
    # The agent's next poll (answered at once, or at its wait's end), then a
    # heartbeat built after it that leaves the run out: the run is gone.
    later = node.work(wait=0)
    assert later.at is not None and not later.starts
    beat(node, running=[], work_through=later.at)
    lost = served.job(job_id)
    assert lost.state in ("pending", "assigned") and lost.restarts == 1, lost


def test_the_interval_lease_and_node_timeout_grow_with_the_cluster(
    database_url: str, tmp_path: Path
) -> None:
    # 2 heartbeats a second at 1 s: past 2 nodes the interval stretches,
    # 10 nodes make it 5 times longer.
    server = Served(
        database_url,
        tmp_path / "server.log",
        heartbeat_seconds=str(HEARTBEAT),
        node_timeout_seconds="3",
        lease_seconds="2",
        lease_grace_seconds="0.5",
        max_heartbeats_per_second="2",
        tick_seconds="0.2",
    ).start()
    try:
        with server.client() as http:
            api = ServedApi(http)
            nodes = [WireAgent(api, f"n{i}", gpus=1) for i in range(10)]
            for node in nodes:
                node.register()

            # The scheduler counts the healthy nodes every few seconds; all of
            # them heartbeat meanwhile (the node timeout is still 3 s).
            def all_beat() -> HeartbeatReply:
                return [beat(node, [], None) for node in nodes][-1]

            reply = wait_until(
                all_beat,
                30,
                "the heartbeat interval to stretch",
                until=lambda r: r.heartbeat_seconds > HEARTBEAT,
            )
            assert (reply.heartbeat_seconds, reply.lease_seconds) == (5.0, 10.0), reply
            # The others heartbeat, `n9` falls silent for longer than the
            # configured node timeout (3 s) but not the stretched one (15 s).
            silent_since = time.time()
            while time.time() - silent_since < 6.0:
                for node in nodes[:-1]:
                    beat(node, [], None)
                time.sleep(0.5)
            listed = {n["name"]: n for n in http.get("/api/v1/nodes").json()["items"]}
            assert listed["n9"]["healthy"] is True, listed["n9"]
    finally:
        server.stop()


def test_a_heartbeat_built_before_an_exit_was_acknowledged_orders_no_stop(
    served: ServedApi,
) -> None:
    node = WireAgent(served, "n1", gpus=1)
    node.register()
    job_id = served.submit()
    wait_until(lambda: node.work(wait=2.0).starts, 30, "the job's start")
    node.start(job_id, 1)
    # The agent lists the run until its exit is acknowledged: a heartbeat built
    # meanwhile arrives after the exit. A run the server never knew is still
    # told to stop.
    node.exit(job_id, 1, 0, on_its_own=True)
    unknown = job_id + 1000
    beat(node, running=[job_id, unknown], work_through=None)
    stops = node.work(wait=0).stops
    assert [(s.job_id, s.reason) for s in stops] == [(unknown, "lost")], stops
    assert served.job(job_id).state == "succeeded"
