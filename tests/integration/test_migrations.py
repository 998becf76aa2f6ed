"""The Alembic migrations (and the declared-columns step) create the schema the models describe."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from pg_server import Postgres
from sqlalchemy import inspect
from sqlmodel import SQLModel

from schedulearn.server import db, models  # noqa: F401  (registers the tables)
from schedulearn.server.declared import add_missing_columns
from waiting import wait_until


def test_migrations_match_the_models(empty_database_url: str) -> None:
    database = db.Database(empty_database_url)
    try:
        db.run_revisions(database.engine)  # every revision, as an old database gets them
        db.migrate(database.engine)  # idempotent: a second start changes nothing
        with database.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
            tables = set(inspect(conn).get_table_names())
        assert diff == [], f"models and migrations differ: {diff}"
        assert {"job", "node", "gpu", "allocation", "job_part", "token"} <= tables
    finally:
        database.close()


def _default(default: object) -> str:
    # A serial key's sequence keeps the name of the table it was made for
    # (PostgreSQL): revision 0004 built `token` as `token_new`, then renamed it.
    return re.sub(r"nextval\('\w+'::regclass\)", "nextval(its sequence)", str(default))


def _schema(engine: sa.Engine) -> dict[str, dict[str, list[Any]]]:
    """Everything the database says of its tables, in an order of its own."""
    with engine.connect() as conn:
        seen = inspect(conn)
        return {
            table: {
                "columns": sorted(
                    (c["name"], str(c["type"]), c["nullable"], _default(c.get("default")))
                    for c in seen.get_columns(table)
                ),
                "key": seen.get_pk_constraint(table)["constrained_columns"],
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                    for i in seen.get_indexes(table)
                ),
                "foreign keys": sorted(
                    (tuple(f["constrained_columns"]), f["referred_table"])
                    for f in seen.get_foreign_keys(table)
                ),
                "unique": sorted(
                    tuple(u["column_names"]) for u in seen.get_unique_constraints(table)
                ),
            }
            for table in sorted(seen.get_table_names())
        }


def test_a_new_database_is_built_from_the_models_as_the_revisions_would_make_it(
    empty_database_url: str, postgres: Postgres | None, tmp_path: Path
) -> None:
    other_url = (
        postgres.new_database() if postgres is not None else f"sqlite:///{tmp_path / 'other.db'}"
    )
    built, upgraded = db.Database(empty_database_url), db.Database(other_url)
    try:
        db.migrate(built.engine)  # new: from the models, stamped
        db.run_revisions(upgraded.engine)
        head = db.head_revision()
        for database in (built, upgraded):
            with database.engine.connect() as conn:
                stamped = conn.execute(sa.text("SELECT version_num FROM alembic_version"))
                assert stamped.scalars().all() == [head]
        made, upgraded_to = _schema(built.engine), _schema(upgraded.engine)
        differences = [
            (table, part, made.get(table, {}).get(part), upgraded_to.get(table, {}).get(part))
            for table in sorted(set(made) | set(upgraded_to))
            for part in ("columns", "key", "indexes", "foreign keys", "unique")
            if made.get(table, {}).get(part) != upgraded_to.get(table, {}).get(part)
        ]
        assert differences == [], "built from the models, then by the revisions: " + "\n".join(
            f"{table} {part}: {sorted(set(a or []) ^ set(b or []))}"
            for table, part, a, b in differences
        )
        # The next start finds it at the newest revision and changes nothing.
        db.migrate(built.engine)
        with built.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
        assert diff == []
    finally:
        built.close()
        upgraded.close()


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    database = db.Database(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with database.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        database.close()


def test_a_declared_column_the_database_lacks_is_added_at_start(empty_database_url: str) -> None:
    """A field declared after the database was made becomes a column at the
    next start, keeping the rows it had (no migration file)."""
    database = db.Database(empty_database_url)
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


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return set(inspect(conn).get_table_names())
    finally:
        engine.dispose()


def test_a_migration_waits_for_another_replicas(postgres_server: Postgres) -> None:
    url = postgres_server.new_database()
    database = db.Database(url)
    other = sa.create_engine(url)
    try:
        with other.connect() as held:  # another replica migrating
            held.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": db.MIGRATION_LOCK})
            migrating = threading.Thread(target=db.migrate, args=(database.engine,))
            migrating.start()
            migrating.join(1.0)
            assert migrating.is_alive() and "job" not in _tables(url)
            held.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": db.MIGRATION_LOCK})
            migrating.join(60)
        assert not migrating.is_alive()
        assert {"job", "alembic_version"} <= _tables(url)
    finally:
        other.dispose()
        database.close()


def test_replicas_started_together_on_a_new_database_all_come_up(postgres_server: Postgres) -> None:
    url = postgres_server.new_database()
    databases = [db.Database(url) for _ in range(4)]
    together = threading.Barrier(len(databases))
    failed: list[BaseException] = []

    def start(database: db.Database) -> None:
        together.wait()
        try:
            db.migrate(database.engine)
        except BaseException as exc:  # reported below, with the others'
            failed.append(exc)

    threads = [threading.Thread(target=start, args=(d,)) for d in databases]
    try:
        for t in threads:
            t.start()
        wait_until(lambda: not any(t.is_alive() for t in threads), 120, "every migration")
        assert failed == []
        assert "job" in _tables(url)
    finally:
        for d in databases:
            d.close()
