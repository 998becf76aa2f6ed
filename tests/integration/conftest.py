"""Fixtures for the server's integration tests: a database per test (SQLite,
or PostgreSQL when SCHEDULEARN_TEST_POSTGRES=1, or each test on both when it
is `both`, as CI runs them), an app built by `create_app`, and an HTTP client
speaking to it.

PostgreSQL is a real server these fixtures start themselves: `initdb` and
`pg_ctl` as the unprivileged `postgres` user (via `runuser`), in a temp
directory, on a free port, once per session (so once per xdist worker).
Each test gets its own database in it, a copy of a template migrated once
(`database_url`; `empty_database_url` for the tests of migrations and of a
first start; `session` for a session on it). Tests marked `postgres` need it even
on the SQLite run (`postgres_server`); without PostgreSQL they skip locally
and fail in CI.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pg_server import PG_BIN, POSTGRESQL, Postgres, backends, own_stores
from server_api import ADMIN, AGENT, Api
from sqlmodel import Session

from dependencies import Dependency, missing
from schedulearn.server import create_app
from schedulearn.server.db import Database, migrate
from schedulearn.settings import ServerSettings


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    """A PostgreSQL server for this session (one per xdist worker), whatever the mode."""
    if not (PG_BIN / "initdb").exists():
        missing(Dependency.POSTGRES, f"no {PG_BIN / 'initdb'}")
    server = Postgres()
    try:
        yield server
    finally:
        server.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """With two backends, every test that uses a database runs once on each
    (ids `[sqlite]`, `[postgresql]`); with one, ids stay as they are."""
    if "backend" in metafunc.fixturenames and len(backends()) > 1:
        metafunc.parametrize("backend", backends(), indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The database this test runs on: `sqlite` or `postgresql`."""
    return str(getattr(request, "param", backends()[0]))


@pytest.fixture
def postgres(backend: str, request: pytest.FixtureRequest) -> Postgres | None:
    """The server this test's databases live on when it runs on PostgreSQL, else None.

    The server itself is the session's (`postgres_server`): started once per
    worker, on the first test that needs it, whichever backend came first.
    """
    if backend != POSTGRESQL:
        return None
    server: Postgres = request.getfixturevalue("postgres_server")
    return server


@pytest.fixture
def empty_database_url(postgres: Postgres | None, tmp_path: Path) -> str:
    """A new, empty database: for the tests of migrations and of a first start."""
    if postgres is not None:
        return postgres.new_database()
    return f"sqlite:///{tmp_path / 'schedulearn.db'}"


class SchemaTemplates:
    """Databases migrated once per worker, copied for each test (`database_url`)."""

    NAME = "schema_template"  # the PostgreSQL template database

    def __init__(self, root: Path) -> None:
        self.root = root
        self._sqlite: Path | None = None
        self._postgres: set[Path] = set()  # the servers (their directories) that have one

    def sqlite_copy(self, to: Path) -> str:
        if self._sqlite is None:
            self._sqlite = self.root / "schedulearn.db"
            _migrate(f"sqlite:///{self._sqlite}")
        shutil.copyfile(self._sqlite, to)
        return f"sqlite:///{to}"

    def postgres_copy(self, server: Postgres) -> str:
        if server.dir not in self._postgres:
            _migrate(server.new_database(self.NAME))
            self._postgres.add(server.dir)
        return server.new_database(template=self.NAME)


@pytest.fixture(scope="session")
def schema_templates(tmp_path_factory: pytest.TempPathFactory) -> SchemaTemplates:
    return SchemaTemplates(tmp_path_factory.mktemp("schema-template"))


@pytest.fixture
def database_url(
    postgres: Postgres | None, tmp_path: Path, schema_templates: SchemaTemplates
) -> str:
    """A new database with the schema at the newest revision: a copy of a template
    migrated once per worker and backend. Migrating every test's database from
    scratch cost about 0.7 s of CPU a test, on each backend; the migrations
    themselves are tested from an empty database (`empty_database_url`)."""
    if postgres is not None:
        return schema_templates.postgres_copy(postgres)
    return schema_templates.sqlite_copy(tmp_path / "schedulearn.db")


@pytest.fixture
def session(database_url: str) -> Iterator[Session]:
    """A session on `database_url`, for tests that call the services directly."""
    database = Database(database_url)
    try:
        with database.session() as s:
            yield s
    finally:
        database.close()


def _migrate(url: str) -> None:
    """Migrate `url` to the newest revision and let go of every connection (a
    PostgreSQL template must have none; an SQLite file is copied whole)."""
    database = Database(url)
    try:
        migrate(database.engine)
        if database.is_sqlite:
            with database.engine.connect() as conn:  # the whole schema in the main file
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        database.close()


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> ServerSettings:
    settings = ServerSettings(
        database_url=database_url,
        admin_token=ADMIN,
        agent_token=AGENT,
        heartbeat_seconds=0.5,
        # A `WireAgent` sends heartbeats only when a test says so: a short
        # timeout would take its node down on a loaded host, mid-test. Tests
        # of a silent node use `reaping_settings`.
        node_timeout_seconds=120.0,
        # Each heartbeat written before its reply: the rules' tests read what
        # one heartbeat did right after it. The group commit is tested in
        # test_heartbeat_book.py, and by every test of a real agent.
        heartbeat_flush_seconds=0.0,
        tick_seconds=0.2,
        stop_grace_seconds=1.0,
    )
    return settings.model_copy(update=own_stores(database_url, tmp_path))


@pytest.fixture
def reaping_settings(settings: ServerSettings) -> ServerSettings:
    """The integration settings with a node taken down after 2 s of silence
    (so its lease is 1.5 s and its grace 0.3 s: `settings.lease_timing`)."""
    return settings.model_copy(update={"node_timeout_seconds": 2.0})


@pytest.fixture
def api(settings: ServerSettings) -> Iterator[Api]:
    with TestClient(create_app(settings)) as client:
        yield Api(client)
