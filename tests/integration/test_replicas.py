"""Several API replicas on one PostgreSQL database: one schedules, all serve.

Runs on both passes of scripts/test: it starts its own PostgreSQL
(`postgres_server`) when the suite runs on SQLite.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pg_server import Postgres
from server_api import Api, app_state
from wire_agent import WireAgent

from schedulearn.server import create_app
from schedulearn.server.scheduler import LEADER_LOCK
from schedulearn.settings import ServerSettings
from waiting import wait_until

pytestmark = pytest.mark.postgres


def test_one_replica_holds_the_scheduler_lock(
    settings: ServerSettings, postgres_server: Postgres
) -> None:
    if not settings.database_url.startswith("postgresql"):
        settings = settings.model_copy(update={"database_url": postgres_server.new_database()})
    with TestClient(create_app(settings)) as first, TestClient(create_app(settings)) as second:
        replicas = (first, second)

        def leaders() -> list[bool]:
            return sorted(app_state(c).scheduler._leader_conn is not None for c in replicas)

        def both_tried() -> bool:
            return all(app_state(c).scheduler.passes >= 1 for c in replicas)

        # Both have run a scheduling round (each asked for the lock), so the
        # split below is final, not a moment before the second one asks.
        wait_until(both_tried, 10, "both replicas to run a scheduling round")
        assert leaders() == [False, True]
        a, b = Api(first), Api(second)
        WireAgent(a, "n1", gpus=2).register()
        # A job submitted through either replica is placed by the leader, and
        # the agent may poll any replica for its work.
        job = b.post("/api/v1/jobs", json={"command": "x", "gpus": 2}).json()["ids"][0]
        poller = WireAgent(b, "n1", gpus=2)
        start = poller.work_until(lambda w: w.starts).starts[0]
        assert start.job_id == job


def test_a_stopped_scheduler_gives_up_the_lock(
    settings: ServerSettings, postgres_server: Postgres
) -> None:
    """Stopping the leader frees the lock at once, while its process (and its
    connection pool) live on: a pooled connection merely "closed" would keep
    the session and the lock, and no replica could lead again."""
    if not settings.database_url.startswith("postgresql"):
        settings = settings.model_copy(update={"database_url": postgres_server.new_database()})
    with TestClient(create_app(settings)) as client:
        scheduler = app_state(client).scheduler
        wait_until(lambda: scheduler._leader_conn is not None, 10, "the replica to lead")
        assert client.portal is not None
        client.portal.call(scheduler.stop)
        other = scheduler.db.engine.raw_connection()
        try:
            cur = other.cursor()
            cur.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK,))
            assert cur.fetchone() == (True,)
        finally:
            other.invalidate()
