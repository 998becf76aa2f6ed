"""Heartbeats answered from memory and written in group commits
(`server/heartbeat_book.py`), against a real server process on SQLite and
the fixtures' PostgreSQL.

- A node heard within the node timeout is not marked down, however late
  its heartbeats are written; a node not heard is, and its next heartbeat
  is told to register again (no lease from memory for a node marked down).
- The heartbeats heard are written with the rules of a heartbeat written
  alone: a run left out past the report grace is lost, a run the server
  does not know draws a stop order, and the node's `last_seen` moves.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served import ServedApi, served_api
from wire_agent import WireAgent

from waiting import wait_until

NODE_TIMEOUT = 3.0


def serve(database_url: str, tmp_path: Path, flush: float) -> Iterator[ServedApi]:
    yield from served_api(
        database_url,
        tmp_path / "server.log",
        heartbeat_seconds="0.5",
        node_timeout_seconds=str(NODE_TIMEOUT),
        heartbeat_flush_seconds=str(flush),
        tick_seconds="0.2",
    )


@pytest.fixture
def unwritten(database_url: str, tmp_path: Path) -> Iterator[ServedApi]:
    """A server whose group commit comes only after the tests are over."""
    yield from serve(database_url, tmp_path, flush=600.0)


@pytest.fixture
def written(database_url: str, tmp_path: Path) -> Iterator[ServedApi]:
    yield from serve(database_url, tmp_path, flush=0.3)


def nodes(api: ServedApi) -> dict[str, dict[str, Any]]:
    r = api.get("/api/v1/nodes")
    assert r.status_code == 200, r.text
    return {n["name"]: n for n in r.json()["items"]}


def test_a_node_heard_is_not_marked_down_before_its_heartbeats_are_written(
    unwritten: ServedApi,
) -> None:
    up, quiet = WireAgent(unwritten, "up", gpus=1), WireAgent(unwritten, "quiet", gpus=1)
    up.register()
    job_id = unwritten.submit(max_restarts=1)
    (start,) = up.work_until(lambda b: b.starts).starts
    up.start(job_id, start.attempt)
    # Each node's first heartbeat is written before its reply (the server
    # learns that the node is up); `up`'s first, so that in the database it
    # has been silent at least as long as `quiet` from then on.
    assert not up.heartbeat().reregister
    quiet.register()
    assert not quiet.heartbeat().reregister
    seen = nodes(unwritten)["up"]["last_seen"]
    with up.beating(every=0.3):
        # `quiet` falls silent and is marked down past the timeout. `up`,
        # heard all along, has a `last_seen` as old in the database (none of
        # its heartbeats is written in this test): only what the server
        # heard keeps it up.
        wait_until(
            lambda: not nodes(unwritten)["quiet"]["healthy"],
            60,
            "the silent node to be marked down",
        )
        after = nodes(unwritten)["up"]
        assert after["healthy"] and after["last_seen"] == seen, after
        reply = up.heartbeat()
        assert not reply.reregister and reply.lease_seconds, reply
    job = unwritten.job(job_id)
    assert (job.state, job.attempt, job.restarts) == ("running", 1, 0), job
    # A node marked down is no longer answered from memory: it registers again.
    assert quiet.heartbeat().reregister


def test_heartbeats_written_together_keep_a_heartbeats_rules(written: ServedApi) -> None:
    node = WireAgent(written, "n1", gpus=1)
    node.register()
    node.heartbeat()  # written alone: the server learns the node is up
    first_seen = nodes(written)["n1"]["last_seen"]
    job_id = written.submit(max_restarts=1)
    (start,) = node.work_until(lambda b: b.starts).starts
    node.start(job_id, start.attempt)
    # The agent stops listing its run, and lists one the server never gave it.
    node.running.pop(job_id)
    node.running[999] = 1
    with node.beating(every=0.3):
        stops = node.work_until(lambda b: any(s.job_id == 999 for s in b.stops)).stops
        assert [(s.job_id, s.reason) for s in stops if s.job_id == 999] == [(999, "lost")]
        lost = wait_until(
            lambda: written.job(job_id),
            60,
            "the unlisted run to be lost",
            until=lambda j: j.restarts == 1,
        )
        assert lost.state in ("pending", "assigned"), lost
        assert nodes(written)["n1"]["last_seen"] > first_seen
        assert nodes(written)["n1"]["healthy"]
