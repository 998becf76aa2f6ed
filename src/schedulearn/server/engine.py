"""The SQLAlchemy engine of a database URL: SQLite's pragmas and private files,
PostgreSQL's pool and timeouts (`Timeouts`). `server.db` owns what runs on it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

log = logging.getLogger(__name__)


def normalise_url(url: str) -> str:
    """`postgresql://` and `postgres://` mean psycopg 3 here (not psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def private_sqlite_files(path: Path) -> None:
    """Make the SQLite file (and its folder, if new) the server's alone: the file
    0600 before SQLite opens it, as SQLite gives its -wal and -shm files the
    database's mode. They hold every job's secret env (issue 33: a job read
    another user's secret out of a 0644 WAL). Files an older server left
    readable by others are closed here."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        try:
            st = name.stat()
        except FileNotFoundError:
            continue
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            name.chmod(0o600)
            log.warning("%s was readable by other users; made it 0600", name)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long PostgreSQL may take (SQLite is a local file: none of these apply)."""

    connect_seconds: float = 3.0  # a new connection (libpq counts whole seconds, at least 2)
    statement_seconds: float = 30.0  # one statement, cancelled by PostgreSQL (0: none)
    answer_seconds: float = 3.0  # no answer at all while a query runs: 503 (0: wait)


def make_engine(url: str, timeouts: Timeouts | None = None, *, pooled: bool = True) -> Engine:
    """The engine of `url`; with `pooled=False` (PostgreSQL) every connect opens a
    new connection, closed when given back (`Database`'s stall probe)."""
    timeouts = timeouts or Timeouts()
    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            private_sqlite_files(Path(parsed.database))
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            poolclass=NullPool if parsed.database in (None, "", ":memory:") else None,
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    connect_args: dict[str, Any] = {"connect_timeout": max(2, round(timeouts.connect_seconds))}
    if timeouts.statement_seconds > 0:
        ms = round(timeouts.statement_seconds * 1000)
        connect_args["options"] = f"-c statement_timeout={ms}"
    if not pooled:
        return create_engine(url, poolclass=NullPool, connect_args=connect_args)
    return create_engine(
        url,
        pool_size=8,
        max_overflow=8,
        pool_pre_ping=True,
        # A request that waits this long for a connection gets 503 (4 s as
        # before the stall probe: a busy pool is not a frozen database).
        pool_timeout=max(4.0, timeouts.answer_seconds) if timeouts.answer_seconds else 30.0,
        connect_args=connect_args,
    )
