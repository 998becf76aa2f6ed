"""Fixtures for the server's integration tests: a database per test (SQLite,
or PostgreSQL when SCHEDULEARN_TEST_POSTGRES=1), an app built by
`create_app`, and an HTTP client speaking to it.

PostgreSQL is a real server these fixtures start themselves: `initdb` and
`pg_ctl` as the unprivileged `postgres` user (via `runuser`), in a temp
directory, on a free port. Each test gets its own database in it.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_api import ADMIN, AGENT, Api

from schedulearn.cli.localcluster import free_port
from schedulearn.server import create_app
from schedulearn.settings import ServerSettings

PG_BIN = Path("/usr/lib/postgresql/15/bin")
_db_numbers = itertools.count(1)


def use_postgres() -> bool:
    return os.environ.get("SCHEDULEARN_TEST_POSTGRES") == "1"


class Postgres:
    """A throwaway PostgreSQL server owned by the test session."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sl-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        shutil.chown(self.dir, "postgres", "postgres")
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self._pg(
            "pg_ctl", "-D", str(self.data), "-w", "-l", str(self.dir / "log"),
            "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=300",
            "start",
        )  # fmt: skip

    def _pg(self, tool: str, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / tool), *args],
            check=True,
            capture_output=True,
            cwd=self.dir,
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        import psycopg

        name = f"t{os.getpid()}_{next(_db_numbers)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(self.data),
             "-m", "immediate", "stop"],
            capture_output=True,
        )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres | None]:
    if not use_postgres():
        yield None
        return
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"SCHEDULEARN_TEST_POSTGRES=1 but PostgreSQL 15 is not installed ({PG_BIN})")
    server = Postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def database_url(postgres: Postgres | None, tmp_path: Path) -> str:
    if postgres is not None:
        return postgres.new_database()
    return f"sqlite:///{tmp_path / 'schedulearn.db'}"


@pytest.fixture
def settings(database_url: str) -> ServerSettings:
    return ServerSettings(
        database_url=database_url,
        admin_token=ADMIN,
        agent_token=AGENT,
        print_tokens=False,
        heartbeat_seconds=0.5,
        node_timeout_seconds=2.0,
        tick_seconds=0.2,
        stop_grace_seconds=1.0,
    )


@pytest.fixture
def api(settings: ServerSettings) -> Iterator[Api]:
    with TestClient(create_app(settings)) as client:
        yield Api(client)
