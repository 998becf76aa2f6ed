"""An agent's exit report that races another writer is recorded, not a 500
(issue 36: `POST /api/v1/agent/events` answered 500 StaleState under load).

A real server process on 127.0.0.1; the other writer is the test itself,
through the server's own `lifecycle.part_lost` on the same database (as
the reaper or a heartbeat of another replica loses a part): it writes the
part off and holds its transaction open while the exit report comes in.
On PostgreSQL the report's conditional UPDATE then waits on the part's
row lock and, once the test commits, matches no row: the batch must read
again and judge the exit as a late one (the job has not run again, so it
stands). On SQLite the report waits for the database lock and reads after
the commit: the same end, by another road.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from served import ServedApi, served_api
from sqlalchemy import text
from sqlmodel import col, select
from wire_agent import WireAgent

from schedulearn.server.db import Database
from schedulearn.server.models import Job, JobPart
from schedulearn.server.services import lifecycle
from waiting import wait_until


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[ServedApi]:
    yield from served_api(database_url, tmp_path / "server.log", node_timeout_seconds="120")


def waiting_on_a_lock(database: Database) -> bool:
    """Whether a backend of the server waits on a row lock (PostgreSQL)."""
    with database.engine.connect() as conn:
        waiting = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        ).scalar_one()
    return bool(waiting)


def test_an_exit_racing_a_write_off_is_judged_again_not_refused(
    served: ServedApi, database_url: str
) -> None:
    node = WireAgent(served, "n1", gpus=1)
    node.register()
    job_id = served.submit(max_restarts=1)
    wait_until(lambda: node.work(wait=2.0).starts, 30, "the job's start")
    node.start(job_id, 1)
    database = Database(database_url)
    answer: list[httpx.Response] = []
    try:
        with database.session() as session:
            job = session.get(Job, job_id)
            part = session.exec(select(JobPart).where(col(JobPart.job_id) == job_id)).one()
            assert job is not None
            lifecycle.part_lost(
                session, job, part, time.time(), "node n1 stopped answering (the test)"
            )
            session.flush()  # the part's row is now locked by this transaction

            def report() -> None:
                answer.append(
                    served.post(
                        "/api/v1/agent/events",
                        headers=node.headers,
                        json={
                            "events": [
                                {
                                    "job_id": job_id,
                                    "attempt": 1,
                                    "node": "n1",
                                    "kind": "exited",
                                    "exit_code": 0,
                                    "at": time.time(),
                                    "on_its_own": True,
                                }
                            ]
                        },
                    )
                )

            reporter = threading.Thread(target=report, daemon=True)
            reporter.start()
            if database.is_sqlite:
                time.sleep(1.0)  # the report waits for the database lock
            else:
                wait_until(lambda: waiting_on_a_lock(database), 30, "the report to wait")
            session.commit()
        reporter.join(60)
    finally:
        database.close()
    assert answer and answer[0].status_code == 200, answer and answer[0].text
    # The run ended on its own before the job ran again: its exit stands.
    job_now = served.job(job_id)
    assert (job_now.state, job_now.exit_code) == ("succeeded", 0), job_now
