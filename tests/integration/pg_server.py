"""`Postgres`: a throwaway PostgreSQL 15 server started by the tests themselves.

`initdb` and `pg_ctl` run as the unprivileged `postgres` user (via
`runuser`) in a fresh temp directory, on a free port, so any number of
sessions (pytest-xdist workers) each run their own without sharing state.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from schedulearn.cli.localcluster import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")
_db_numbers = itertools.count(1)


SQLITE = "sqlite"
POSTGRESQL = "postgresql"
BOTH = "both"


def backends() -> tuple[str, ...]:
    """The databases the integration tests run on, from SCHEDULEARN_TEST_POSTGRES:
    unset: SQLite; `1`: PostgreSQL; `both`: each test that uses a database runs
    on each (one pytest run, so pytest-xdist balances the two as one suite)."""
    chosen = os.environ.get("SCHEDULEARN_TEST_POSTGRES", "")
    if chosen == BOTH:
        return (SQLITE, POSTGRESQL)
    return (POSTGRESQL,) if chosen == "1" else (SQLITE,)


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
