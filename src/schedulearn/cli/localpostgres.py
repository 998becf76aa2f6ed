"""A throwaway PostgreSQL 15 on 127.0.0.1, for tests and benchmarks.

`initdb` and `pg_ctl` run as the unprivileged `postgres` user (via
`runuser`: `initdb` refuses root) in a fresh temp directory, on a free
port, with fsync off, so any number of test sessions each run their own.
It can be crashed (an immediate stop, as a power cut would leave it) and
started again on the same data, which is what `bench/chaos.py` does; the
integration tests' `pg_server.Postgres` is this class.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from schedulearn.cli.freeports import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")
_db_numbers = itertools.count(1)


class LocalPostgres:
    """Made and started by the constructor; `remove()` stops it and deletes its files."""

    def __init__(self, prefix: str = "sl-pg-") -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.data = self.dir / "data"
        self.port = free_port()
        shutil.chown(self.dir, "postgres", "postgres")
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()

    def _pg(self, tool: str, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / tool), *args],
            check=True,
            capture_output=True,
            cwd=self.dir,
        )

    def start(self) -> None:
        self._pg(
            "pg_ctl", "-D", str(self.data), "-w", "-l", str(self.dir / "log"),
            "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=300",
            "start",
        )  # fmt: skip

    def crash(self) -> None:
        """An immediate stop: no checkpoint, as a crash would leave the data."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self, name: str | None = None, template: str | None = None) -> str:
        """A new database (named after this process when no name is given): its URL.

        Empty, or a copy of database `template` (which nothing may be connected to)."""
        import psycopg

        name = name or f"t{os.getpid()}_{next(_db_numbers)}"
        copy = f' TEMPLATE "{template}"' if template else ""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{copy}')
        return self.url(name)

    def advisory_holder(self, lock: int, database: str) -> str | None:
        """The application_name of the session holding advisory lock `lock` in
        `database`, if any (None too while the server is down)."""
        import psycopg

        query = (
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.objid = %s AND l.granted AND a.datname = %s"
        )
        try:
            with psycopg.connect(self.url(), autocommit=True, connect_timeout=3) as conn:
                row = conn.execute(query, (lock, database)).fetchone()
        except psycopg.Error:
            return None
        return None if row is None else str(row[0])

    def remove(self, in_background: bool = False) -> None:
        """Stop the server at once and delete its files; `in_background`: leave the
        deleting to an `rm` that outlives the caller (gigabytes of databases take
        tens of seconds)."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self.crash()
        if in_background:
            # sh starts rm in the background and exits: nothing of ours waits for it.
            subprocess.run(["sh", "-c", 'rm -rf -- "$0" &', str(self.dir)], check=True)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
