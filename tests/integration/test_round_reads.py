"""What every scheduling round reads of the job table besides the pass: the
jobs with a time limit (`timelimits.enforce`) and the waiting jobs with a
dependency (`dependencies.settle`). Each goes through its partial index
(migration 0019), so a long queue of jobs with neither is not read each
round (issue 36 item 5). SQLite's planner is asked; PostgreSQL's choice
depends on its statistics, and the migration tests hold its schema."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.sql import ClauseElement

from schedulearn.server import db
from schedulearn.server.services import dependencies, timelimits


def plan(database: db.Database, stmt: ClauseElement) -> str:
    sql = str(stmt.compile(database.engine, compile_kwargs={"literal_binds": True}))
    with database.engine.connect() as conn:
        return " | ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))


def test_each_round_reads_its_jobs_through_a_partial_index(tmp_path: Path) -> None:
    database = db.Database(f"sqlite:///{tmp_path / 'rounds.db'}")
    try:
        db.migrate(database.engine)
        assert plan(database, timelimits._LIMITED) == (
            "SEARCH job USING INDEX ix_job_limited (state=?)"
        )
        assert plan(database, dependencies._WAITING) == (
            "SEARCH job USING INDEX ix_job_dependent (state=?)"
        )
    finally:
        database.close()
