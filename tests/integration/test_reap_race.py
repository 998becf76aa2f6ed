"""A heartbeat written while the reaper marks its node down: the node stays up.

A real server process on 127.0.0.1 with PostgreSQL, where the server
writes on several database threads (on SQLite one thread does every write
in turn, so a heartbeat and the reaper cannot interleave). The reaper reads
which nodes are silent, then writes each one down. A heartbeat that
committed in between was answered with a lease; the reaper's write then
followed it (the row lock passed on) and marked the node down anyway, and
its runs were requeued while its agent held a fresh lease: two live copies
of a job. The reaper now marks a node down only if it is still silent as
its write takes the row.

The test plays the race with its own transaction: it locks the node's row,
sends a heartbeat (whose write waits on the lock), waits until the reaper
waits behind it, and lets go. Both ways of writing heartbeats: each before
its reply, and answered from memory (`heartbeat_flush_seconds` 0.5; the
node's first heartbeat is written before its reply there too).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served import ServedApi, served_api
from sqlalchemy import text
from wire_agent import WireAgent

from schedulearn.protocol import HeartbeatReply
from schedulearn.server.db import Database
from waiting import wait_until

NODE_TIMEOUT = 5.0


@pytest.fixture(params=["0", "0.5"], ids=["written-before-reply", "from-memory"])
def served(
    request: pytest.FixtureRequest, database_url: str, tmp_path: Path
) -> Iterator[ServedApi]:
    if database_url.startswith("sqlite"):
        pytest.skip("one database thread on SQLite: a heartbeat and the reaper never interleave")
    yield from served_api(
        database_url,
        tmp_path / "server.log",
        heartbeat_seconds="0.5",
        node_timeout_seconds=str(NODE_TIMEOUT),
        heartbeat_flush_seconds=request.param,
        tick_seconds="0.2",
    )


def node_row(api: ServedApi, name: str) -> dict[str, Any]:
    r = api.get("/api/v1/nodes")
    assert r.status_code == 200, r.text
    (node,) = [n for n in r.json()["items"] if n["name"] == name]
    return dict(node)


def healthy(api: ServedApi, name: str) -> bool:
    return bool(node_row(api, name)["healthy"])


def last_seen(api: ServedApi, name: str) -> float:
    return float(node_row(api, name)["last_seen"])


def lock_waiters(database: Database) -> list[str]:
    """The statements of the server's backends that wait on a lock, in the
    order they began to wait."""
    with database.engine.connect() as conn:
        return [
            str(q)
            for (q,) in conn.execute(
                text(
                    "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' ORDER BY state_change"
                )
            )
        ]


def test_a_heartbeat_committed_as_the_reaper_writes_keeps_its_node_up(
    served: ServedApi, database_url: str
) -> None:
    node = WireAgent(served, "n1", gpus=1)
    node.register()
    job_id = served.submit(max_restarts=1)
    (start,) = node.work_until(lambda b: b.starts).starts
    node.start(job_id, start.attempt)
    replies: list[HeartbeatReply] = []
    database = Database(database_url)
    try:
        with database.engine.connect() as conn:
            conn.execute(text("SELECT name FROM node WHERE name = 'n1' FOR UPDATE"))
            # The node has been silent since it registered. Its heartbeat
            # comes late in the node timeout, so that it is recent still when
            # the reaper, a moment later, finds the node silent in the
            # database (the heartbeat not committed) and writes it down; a
            # heartbeat older than the reaper's cutoff rightly changes nothing
            # (the lease its reply grants has ended by then).
            silent_since = last_seen(served, "n1")
            wait_until(
                lambda: time.time() >= silent_since + NODE_TIMEOUT - 2.0,
                30,
                "the node timeout to be nearly over",
            )
            beat = threading.Thread(target=lambda: replies.append(node.heartbeat()), daemon=True)
            beat.start()
            wait_until(lambda: lock_waiters(database), 30, "the heartbeat to wait")
            # Past the node timeout the reaper finds the node, and its write
            # waits behind the heartbeat's.
            waiting = wait_until(
                lambda: lock_waiters(database), 60, "the reaper", until=lambda w: len(w) >= 2
            )
            # The heartbeat's write first, the reaper's behind it.
            assert "SET last_seen" in waiting[0] and "SET healthy" in waiting[1], waiting
            conn.rollback()
        beat.join(60)
    finally:
        database.close()
    assert replies, "the heartbeat got no reply"
    (reply,) = replies
    assert not reply.reregister and reply.lease_seconds, reply
    with node.beating(every=0.3):
        # A few of the reaper's rounds (every 0.2 s) later, the node is up
        # and its run is where it was.
        time.sleep(2.0)
        assert healthy(served, "n1")
        job = served.job(job_id)
        assert (job.state, job.attempt, job.restarts) == ("running", 1, 0), job
