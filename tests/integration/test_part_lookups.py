"""An agent's reports find their job part by job, whatever the node has run before.

Every report (an event batch, log lines, progress) looks up its part by
job, attempt and node. With indexes on `job_id` alone and on `(node,
status)`, SQLite chose the node's index and walked every part the node
had ever run: a cost that grew with the node's history (5 ms a report
after 9,250 jobs; migration 0011 says more). Each statement the lookups
send is captured here and its SQLite plan read; `bench/api_load.py`
measures the cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, event
from sqlmodel import Session

from schedulearn.protocol import EventKind, JobEventReport
from schedulearn.server.db import Database, migrate
from schedulearn.server.services import agent_access, agents
from schedulearn.server.services.enrollment import AgentIdentity


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = Database(f"sqlite:///{tmp_path / 'parts.db'}")
    migrate(db.engine)
    try:
        yield db
    finally:
        db.close()


def plans_of(database: Database, lookup: Callable[[Session], object]) -> list[str]:
    """The SQLite plan of every statement `lookup` sends, one line per step."""
    sent: list[str] = []

    def capture(
        conn: Connection,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        sent.append(statement)

    event.listen(database.engine, "before_cursor_execute", capture)
    try:
        with database.session() as session:
            lookup(session)
    finally:
        event.remove(database.engine, "before_cursor_execute", capture)
    steps = []
    with database.engine.connect() as conn:
        for statement in sent:
            if statement.lstrip().upper().startswith("SELECT") and "job_part" in statement:
                raw = conn.connection.dbapi_connection
                assert raw is not None
                plan = raw.execute(
                    "EXPLAIN QUERY PLAN " + statement, [None] * statement.count("?")
                ).fetchall()
                steps += [row[-1] for row in plan]
    assert steps, f"no lookup of job_part among {sent}"
    return steps


def exit_report(job_id: int) -> JobEventReport:
    return JobEventReport(
        job_id=job_id, attempt=1, node="n1", kind=EventKind.EXITED, exit_code=0, at=0.0
    )


@pytest.mark.parametrize(
    "lookup",
    [
        pytest.param(lambda s: agent_access.owns_attempt(s, "n1", 7, 1), id="owns_attempt"),
        pytest.param(lambda s: agent_access.require_live(s, "n1", 7, 1), id="require_live"),
        pytest.param(
            lambda s: agents.record_late_exit(s, 7, exit_report(7), 0.0), id="record_late_exit"
        ),
        pytest.param(
            lambda s: agent_access.record_events(
                s, AgentIdentity("digest", "n1"), [exit_report(7), exit_report(8)], 0.0
            ),
            id="record_events",
        ),
    ],
)
def test_a_report_finds_its_part_by_job_not_by_walking_the_node(
    database: Database, lookup: Callable[[Session], object]
) -> None:
    on_parts = [step for step in plans_of(database, lookup) if " job_part" in step]
    assert on_parts and all(
        "USING INDEX ix_job_part_job_attempt_node (job_id=?" in step
        or "USING COVERING INDEX ix_job_part_job_attempt_node (job_id=?" in step
        for step in on_parts
    ), on_parts
