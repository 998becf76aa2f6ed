"""Several API replicas on one PostgreSQL database: one schedules, all serve."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from wire_agent import WireAgent

from schedulearn.server import create_app
from schedulearn.settings import ServerSettings


def test_one_replica_holds_the_scheduler_lock(settings: ServerSettings) -> None:
    if not settings.database_url.startswith("postgresql"):
        pytest.skip("replicas share a PostgreSQL database (SCHEDULEARN_TEST_POSTGRES=1)")
    with TestClient(create_app(settings)) as first, TestClient(create_app(settings)) as second:
        time.sleep(0.5)
        leaders = [
            c.app.state.sl.scheduler._leader_conn is not None  # type: ignore[attr-defined]
            for c in (first, second)
        ]
        assert sorted(leaders) == [False, True]
        from server_api import Api

        a, b = Api(first), Api(second)
        WireAgent(a, "n1", gpus=2).register()
        # A job submitted through either replica is placed by the leader, and
        # the agent may poll any replica for its work.
        job = b.post("/api/v1/jobs", json={"command": "x", "gpus": 2}).json()["ids"][0]
        poller = WireAgent(b, "n1", gpus=2)
        start = poller.work_until(lambda w: w.starts).starts[0]
        assert start.job_id == job
