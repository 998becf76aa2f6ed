"""The Alembic migrations create exactly the schema the models describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlmodel import SQLModel

from schedulearn.server import db, models  # noqa: F401  (registers the tables)


def test_migrations_match_the_models(database_url: str) -> None:
    database = db.Database(database_url)
    try:
        db.migrate(database.engine)
        db.migrate(database.engine)  # idempotent: a second start changes nothing
        with database.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
            tables = set(inspect(conn).get_table_names())
        assert diff == [], f"models and migrations differ: {diff}"
        assert {"job", "node", "gpu", "allocation", "job_part", "token"} <= tables
    finally:
        database.close()


def test_sqlite_runs_in_wal_mode(tmp_path) -> None:  # type: ignore[no-untyped-def]
    database = db.Database(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with database.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        database.close()
