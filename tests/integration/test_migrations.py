"""The Alembic migrations (and the declared-columns step) create the schema the models describe."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlmodel import SQLModel

from schedulearn.server import db, models  # noqa: F401  (registers the tables)
from schedulearn.server.declared import add_missing_columns


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


def test_sqlite_runs_in_wal_mode(tmp_path) -> None:  # type: ignore[no-untyped-def]  # `tmp_path` left untyped (tests are outside mypy's packages)
    database = db.Database(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with database.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        database.close()


def test_a_declared_column_the_database_lacks_is_added_at_start(database_url: str) -> None:
    """A field declared after the database was made becomes a column at the
    next start, keeping the rows it had (no migration file)."""
    database = db.Database(database_url)
    try:
        db.migrate(database.engine)
        with database.engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO setting (key, value) VALUES ('k', 'v')"))
        later = sa.MetaData()
        sa.Table(
            "setting",
            later,
            sa.Column("key", sa.String, primary_key=True),
            sa.Column("value", sa.String, nullable=False),
            sa.Column("note", sa.String, nullable=True),
            sa.Column("weight", sa.Integer, nullable=False, server_default="3"),
            sa.Column("on", sa.Boolean, nullable=False, server_default=sa.false()),
        )
        with database.engine.begin() as conn:
            added = add_missing_columns(conn, later)
            assert add_missing_columns(conn, later) == []  # idempotent
        assert added == ["setting.note", "setting.weight", "setting.on"]
        with database.engine.connect() as conn:
            row = conn.execute(sa.text('SELECT key, note, weight, "on" FROM setting')).one()
        assert tuple(row) == ("k", None, 3, False)
    finally:
        database.close()


def test_a_missing_column_without_a_default_is_refused_with_what_to_do(
    database_url: str,
) -> None:
    database = db.Database(database_url)
    try:
        db.migrate(database.engine)
        later = sa.MetaData()
        sa.Table(
            "setting",
            later,
            sa.Column("key", sa.String, primary_key=True),
            sa.Column("weight", sa.Integer, nullable=False),
        )
        with (
            database.engine.begin() as conn,
            pytest.raises(RuntimeError, match="give the field a default"),
        ):
            add_missing_columns(conn, later)
    finally:
        database.close()
