"""What every scheduling round reads of the job table besides the pass: the
jobs with a time limit (`timelimits.enforce`), the waiting jobs with a
dependency (`dependencies.settle`), whether a waiting job resumes
(`scheduling.resume`) and whether one needs no GPU (`snapshot.could_change`).
Each goes through its partial index (migrations 0019 and 0020), so a long
queue of jobs with none of these is not read each round (issue 36 item 5).
SQLite's planner is asked; PostgreSQL's choice depends on its statistics,
and the migration tests hold its schema."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.sql import ClauseElement

from schedulearn.server import db
from schedulearn.server.services import dependencies, scheduling, snapshot, timelimits


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
        assert plan(database, scheduling._ANY_RESUMING) == (
            "SEARCH job USING INDEX ix_job_resuming (state=?)"
        )
        # Its free GPUs and preemptible jobs besides: the waiting job that
        # needs no GPU is looked for in the partial index alone.
        could_change = plan(database, snapshot._COULD_CHANGE)
        assert "SEARCH job USING INDEX ix_job_gpuless (state=?)" in could_change, could_change
    finally:
        database.close()
