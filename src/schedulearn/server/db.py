"""The database connection: engine, migrations, and where queries run.

Owns the SQLAlchemy engine of one app. SQLite runs in WAL mode with
`synchronous=NORMAL` (a commit survives a crash of the process, and
readers never block the writer). PostgreSQL is used when the URL names
it, through psycopg 3.

Every query runs through `Database.run`, off the event loop. With SQLite
that is one dedicated thread, so writes are serialised in-process and
never meet SQLITE_BUSY; with PostgreSQL a few threads, and row-level
conditions in the statements keep concurrent writers honest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool
from sqlmodel import Session

log = logging.getLogger(__name__)
T = TypeVar("T")
MIGRATIONS = Path(__file__).parent / "migrations"


def normalise_url(url: str) -> str:
    """`postgresql://` and `postgres://` mean psycopg 3 here (not psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(url: str) -> Engine:
    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
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
    return create_engine(url, pool_size=8, max_overflow=8, pool_pre_ping=True)


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (idempotent; run at start)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


class Database:
    """One app's engine and the threads its queries run on."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        self._executor = ThreadPoolExecutor(
            max_workers=1 if self.is_sqlite else 4, thread_name_prefix="db"
        )

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    def session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(session, *args)` in a fresh session, here and now (blocking)."""
        with self.session() as session:
            return fn(session, *args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(session, *args)` on the database threads and await its result."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.call, fn, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.engine.dispose()
