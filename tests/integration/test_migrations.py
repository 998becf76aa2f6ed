"""The Alembic migrations create the schema the models describe, and only they change it."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.operations import Operations
from pg_server import Postgres
from sqlalchemy import inspect
from sqlmodel import SQLModel, select

from schedulearn.server import db, models  # models: registers the tables
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


def _upgrade_to(engine: sa.Engine, target: str) -> None:
    """Alembic's upgrade to `target`: the revisions alone (env.py adds nothing)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(db.MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, target)


def test_a_database_the_revisions_made_gets_the_declared_columns_with_their_defaults(
    empty_database_url: str,
) -> None:
    """0013 adds the columns earlier servers added at start to a database that
    lacks them (the revisions alone made it), and old rows get the defaults."""
    database = db.Database(empty_database_url)
    try:
        _upgrade_to(database.engine, "0012_log_seq_bigint")
        with database.engine.begin() as conn:
            assert "queue" not in {c["name"] for c in inspect(conn).get_columns("job")}
            conn.execute(
                sa.text(
                    'INSERT INTO job (name, "user", state, command, image, executor, gpus, cpus,'
                    " memory_gb, priority, preemptible, env, launcher, max_restarts, restarts,"
                    " node_losses, attempt, submitted_at, queued_at, service_seconds,"
                    " attained_gpu_seconds, preemptions, migrations, resizes, message) VALUES"
                    " ('old', 'ann', 'pending', '[\"true\"]', NULL, 'subprocess', 1, 0, 0, 0,"
                    " false, '{}', 'none', 3, 0, 0, 0, 5.0, 5.0, 0, 0, 0, 0, 0, '')"
                )
            )
            conn.execute(sa.text("INSERT INTO node (name, address, cpus, memory_gb, executors,"
                                 " healthy, registered_at, last_seen) VALUES"
                                 " ('n1', 'h', 8, 64, '[]', true, 1, 1)"))  # fmt: skip
        db.migrate(database.engine)
        with database.session() as session:
            job = session.exec(select(models.Job)).one()
            node = session.exec(select(models.Node)).one()
            kept = (job.name, job.user, job.submitted_at)
            added = (job.queue, job.held, job.constraints, job.array_size, job.secret_env)
            node_added = (node.drained, node.containment, node.capabilities["executors"])
        assert kept == ("old", "ann", 5.0)
        assert added == ("", False, [], None, None)
        assert node_added == (False, "", ["process"])
        with database.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), SQLModel.metadata) == []
    finally:
        database.close()


def test_a_server_start_changes_a_database_at_the_newest_revision_in_no_way(
    empty_database_url: str,
) -> None:
    """Only the revisions change a schema: a database at the newest revision that
    lacks a column of the models (a field declared with no revision) stays so."""
    database = db.Database(empty_database_url)
    try:
        db.run_revisions(database.engine)
        with (
            database.engine.begin() as conn,
            Operations.context(MigrationContext.configure(conn)) as op,
            op.batch_alter_table("job") as batch,
        ):
            batch.drop_column("held")

        def diff() -> list[Any]:
            with database.engine.connect() as conn:
                return list(compare_metadata(MigrationContext.configure(conn), SQLModel.metadata))

        assert [d[0] for d in diff()] == ["add_column"]  # what an earlier server added at start
        db.migrate(database.engine)
        assert [(d[0], d[2], d[3].name) for d in diff()] == [("add_column", "job", "held")]
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
