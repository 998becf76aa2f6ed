"""The database connection: engine, migrations, and where queries run.

Owns the SQLAlchemy engine of one app. SQLite runs in WAL mode with
`synchronous=NORMAL` (a commit survives a crash of the process, and
readers never block the writer). PostgreSQL is used when the URL names
it, through psycopg 3.

Every query runs through `Database.run`, off the event loop. With SQLite
that is one dedicated thread, so writes are serialised in-process and
never meet SQLITE_BUSY; with PostgreSQL a few threads, and row-level
conditions in the statements keep concurrent writers honest. Requests
take their turn in the order they came; the scheduler's round goes
ahead of every queued request (`run(..., first=True)`, `db_queue`).

`Database.call` is the one transaction wrapper: a transaction that fails
on a deadlock or a serialization failure (PostgreSQL) is rolled back and
run again from the start, a few times with a short jittered pause; a
database that cannot be reached or is full, a statement cancelled by
statement_timeout and a pool with no connection free in time raise
`Unavailable`, which the API answers with 503 and Retry-After. `classify` says which
failure is which. Bulk updates lock rows in id order (the fixed lock
order) so retries stay rare.

A database that is there but does not answer (PostgreSQL frozen: SIGSTOP,
a hung host, a full network buffer; TCP is still accepted by the kernel,
so nothing fails) must not hold requests for minutes (`Timeouts`): new
connections give up after `connect_seconds` (libpq's connect_timeout), a
statement PostgreSQL runs is cancelled after `statement_seconds` (its
statement_timeout), and, since a frozen server enforces no timeout of its
own, `Database.run` answers 503 once the database has answered nothing for
`answer_seconds` while a query of its is running (`Database.stalled`) and
a `SELECT 1` on a new connection gets no answer within `PROBE_SECONDS`
(`Database.answers`): a busy database that keeps answering other queries,
or one slow query on a database that answers the probe, is not stalled.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    inspect,
    text,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlmodel import Session

from schedulearn.server.db_queue import DbQueue
from schedulearn.server.engine import Timeouts, make_engine, normalise_url
from schedulearn.server.errors import Unavailable

__all__ = ["Database", "Fault", "Timeouts", "classify", "make_engine", "migrate", "normalise_url"]

log = logging.getLogger(__name__)
T = TypeVar("T")
MIGRATIONS = Path(__file__).parent / "migrations"


class Fault(enum.Enum):
    """What a database error means for the caller."""

    CONFLICT = "conflict"  # deadlock / serialization failure: run the transaction again
    UNREACHABLE = "unreachable"  # down, restarting, refusing connections
    FULL = "full"  # no disk space (or another resource) left
    SLOW = "slow"  # statement_timeout cancelled it, or no pooled connection came free


# The faults a caller gets 503 with Retry-After for (the others are retried or a bug).
UNAVAILABLE = frozenset({Fault.UNREACHABLE, Fault.FULL, Fault.SLOW})


# PostgreSQL SQLSTATEs (appendix A of its manual).
_CONFLICT_STATES = {"40001", "40P01"}  # serialization_failure, deadlock_detected
_FULL_STATES = {"53100", "53200", "53300"}  # disk_full, out_of_memory, too_many_connections
# query_canceled: statement_timeout (`Timeouts.statement_seconds`) or pg_cancel_backend.
# Not class 57P: the server is up, the statement took too long; nothing was committed.
_SLOW_STATES = {"57014"}
# Connection exceptions (class 08), operator intervention (57P0x: shut down,
# crashed, starting up), system errors (class 58: I/O).
_UNREACHABLE_PREFIXES = ("08", "57P", "58")
_SQLITE_FULL = {sqlite3.SQLITE_FULL}
_SQLITE_UNREACHABLE = {sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_BUSY}
CONFLICT_TRIES = 5
RETRY_AFTER_SECONDS = 2
# How often a request waiting on PostgreSQL looks whether it has stalled.
STALL_CHECK_SECONDS = 0.5
# How long a seemingly stalled PostgreSQL has to answer `SELECT 1` on a new connection.
PROBE_SECONDS = 1.0


def classify(exc: BaseException) -> Fault | None:
    """The `Fault` a database error stands for, or None for any other error (a bug).

    Takes SQLAlchemy's wrapped errors and the drivers' own (raised by code
    that uses a raw connection, like the scheduler's leader lock).
    """
    if isinstance(exc, PoolTimeout):  # every pooled connection busy for `pool_timeout`
        return Fault.SLOW
    if isinstance(exc, DBAPIError):
        orig: BaseException | None = exc.orig
        invalidated = exc.connection_invalidated
    elif isinstance(exc, sqlite3.Error) or type(exc).__module__.startswith("psycopg"):
        orig, invalidated = exc, False
    else:
        return None
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None:
        if code & 0xFF in _SQLITE_FULL:  # extended codes keep the primary in the low byte
            return Fault.FULL
        if code & 0xFF in _SQLITE_UNREACHABLE:
            return Fault.UNREACHABLE
        return None
    state = getattr(orig, "sqlstate", None)
    if state in _CONFLICT_STATES:
        return Fault.CONFLICT
    if state in _FULL_STATES:
        return Fault.FULL
    if state in _SLOW_STATES:
        return Fault.SLOW
    if state and state.startswith(_UNREACHABLE_PREFIXES):
        return Fault.UNREACHABLE
    if invalidated:
        return Fault.UNREACHABLE
    # psycopg's OperationalError without a state: the connection failed or broke.
    if state is None and type(orig).__name__ == "OperationalError":
        return Fault.UNREACHABLE
    return None


def unavailable(exc: BaseException, fault: Fault) -> Unavailable:
    """The 503 a caller gets for an unreachable, full or slow database, saying why."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    cause = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    if fault is Fault.FULL:
        message = (
            f"the database is full ({cause}); nothing was changed. An admin must free space "
            f"(disk or database); try again in {RETRY_AFTER_SECONDS} s or later"
        )
    elif fault is Fault.SLOW:
        message = (
            f"the database did not answer in time ({cause}); nothing was changed. "
            f"Try again in {RETRY_AFTER_SECONDS} s or later"
        )
    else:
        message = (
            f"the database is unavailable ({cause}); nothing was changed. "
            f"Try again in {RETRY_AFTER_SECONDS} s or later"
        )
    return Unavailable(message, retry_after=RETRY_AFTER_SECONDS)


# PostgreSQL advisory lock held while a server migrates (any constant
# shared by all replicas, other than the scheduler's LEADER_LOCK).
MIGRATION_LOCK = 0x5C4EE


def _one_at_a_time(conn: Connection) -> None:
    """With PostgreSQL, wait for any other replica's migration to end first
    (the lock ends with this transaction). Replicas started together on a
    new database otherwise both created Alembic's table, and the loser
    exited ("Application startup failed"). The one that waited then finds
    the schema at head and changes nothing. SQLite has one server per file."""
    if conn.dialect.name == "postgresql":
        # A migration may rewrite a large table: no statement timeout for it.
        conn.execute(text("SET LOCAL statement_timeout = 0"))
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (idempotent; run at start).

    A database already at the newest revision skips Alembic, whose import
    alone is a large share of a server's start-up, and is left as it is:
    the schema changes only by the revisions (a declared field's column
    too: `scripts/new-field` generates its revision). A new database (no
    table at all) is built from the models and stamped at the newest
    revision, Alembic's own recipe for a database made from scratch:
    running every revision on it was a third of a server's first start.
    tests/integration/test_migrations.py checks that the revisions and the
    models make the same schema. Any other database is upgraded by its
    revisions (`run_revisions`).
    """
    head = head_revision()
    if _at_head(engine, head):
        return
    with engine.begin() as conn:
        _one_at_a_time(conn)
        if head is not None and not inspect(conn).get_table_names():
            _build_new(conn, head)
            return
    run_revisions(engine)


def run_revisions(engine: Engine) -> None:
    """Upgrade the database to the newest revision by Alembic's revisions."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        _one_at_a_time(conn)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


# Alembic's own table of the revision a database is at, as Alembic makes it.
_VERSIONS = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)


def _build_new(conn: Connection, head: str) -> None:
    """Every table of the models, in an empty database, at revision `head`."""
    from sqlmodel import SQLModel

    from schedulearn.server import models  # noqa: F401  (registers the tables)

    SQLModel.metadata.create_all(conn)
    _VERSIONS.create(conn)
    conn.execute(_VERSIONS.insert().values(version_num=head))
    log.info("made a new database at revision %s", head)


_REVISION = re.compile(r'^(down_revision|revision)\s*=\s*["\']([^"\']+)["\']', re.MULTILINE)


def head_revision() -> str | None:
    """The one newest revision in `migrations/versions` (None: several heads or none),
    read from the files' `revision`/`down_revision` lines without importing Alembic."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        for key, value in _REVISION.findall(path.read_text(encoding="utf-8")):
            (revisions if key == "revision" else parents).add(value)
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def _at_head(engine: Engine, head: str | None) -> bool:
    """Whether the database is at revision `head` (None: no single head is known)."""
    if head is None:
        return False
    try:
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    except DBAPIError as exc:
        if classify(exc) is not None:
            raise  # unreachable or full: Alembic would fail the same way, only later
        return False  # no alembic_version table yet: a new database
    return stored == [head]


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", repr(fn))


class Database:
    """One app's engine and the threads its queries run on."""

    def __init__(self, url: str, timeouts: Timeouts | None = None) -> None:
        self.timeouts = timeouts or Timeouts()
        self.engine = make_engine(url, self.timeouts)
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        self._executor = DbQueue(1 if self.is_sqlite else 4, name="db")
        # For `stalled`: when each running call started, and when one last ended.
        self._lock = threading.Lock()
        self._running: dict[int, float] = {}
        self._last_answer = time.monotonic()
        # `answers`: its own thread and unpooled engine, so a probe never waits
        # behind the queries it is asking about (nor for their pooled connections).
        self._probe: Future[None] | None = None
        self._probe_engine = (
            None if self.is_sqlite else make_engine(url, self.timeouts, pooled=False)
        )
        self._probe_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="db-probe")

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    @property
    def threads(self) -> int:
        """How many database threads run calls at once (SQLite: one)."""
        return self._executor.threads

    def waiting(self) -> tuple[int, int]:
        """How many calls wait for a database thread: (the scheduler's, requests)."""
        return self._executor.waiting()

    def session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(session, *args)` in a fresh session, here and now (blocking).

        `fn` is one transaction (it commits, or changes nothing): on a
        deadlock or serialization failure it is rolled back and run again,
        up to `CONFLICT_TRIES` times; an unreachable or full database raises
        `Unavailable` (never retried here: a commit that broke off
        may have happened, and the client's retry, with its idempotency key,
        is the safe one).
        """
        token = object()
        with self._lock:
            self._running[id(token)] = time.monotonic()
        try:
            return self._call(fn, *args)
        finally:
            with self._lock:
                del self._running[id(token)]
                self._last_answer = time.monotonic()

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        for attempt in range(1, CONFLICT_TRIES + 1):
            try:
                with self.session() as session:
                    return fn(session, *args)
            except Exception as exc:
                fault = classify(exc)
                if fault is Fault.CONFLICT and attempt < CONFLICT_TRIES:
                    log.info("%s: %s; running it again", _name(fn), exc)
                    time.sleep(random.uniform(0.5, 1.5) * 0.01 * 2**attempt)
                    continue
                if fault in UNAVAILABLE:
                    raise unavailable(exc, fault) from exc
                raise
        raise AssertionError("unreachable: the last try returns or raises")

    def stalled(self) -> float | None:
        """Seconds the database has answered nothing while a query of ours ran
        longer than `answer_seconds`, or None (answering, idle, or SQLite)."""
        limit = self.timeouts.answer_seconds
        if self.is_sqlite or limit <= 0:
            return None
        now = time.monotonic()
        with self._lock:
            oldest = min(self._running.values(), default=now)
            silent = now - max(self._last_answer, oldest)
        return silent if now - oldest > limit and silent > limit else None

    def _ping(self) -> None:
        assert self._probe_engine is not None
        with self._probe_engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        with self._lock:
            self._last_answer = time.monotonic()  # answering: `stalled` starts over

    async def answers(self) -> bool:
        """Whether PostgreSQL answers `SELECT 1` on a new connection within
        `PROBE_SECONDS`. Requests waiting at once share one probe; a probe still
        hanging (a frozen server enforces no timeout) is waited on, not repeated."""
        with self._lock:
            probe = self._probe
            if probe is None or probe.done():
                probe = self._probe = self._probe_executor.submit(self._ping)
        # asyncio.wait, not wait_for: the probe is shared and must not be cancelled.
        done, _ = await asyncio.wait({asyncio.wrap_future(probe)}, timeout=PROBE_SECONDS)
        return bool(done) and probe.exception() is None

    async def run(self, fn: Callable[..., T], *args: Any, first: bool = False) -> T:
        """Run `fn(session, *args)` on the database threads and await its result;
        `Unavailable` once the database is `stalled` and no longer `answers` (a call
        still queued then never runs). `first`: ahead of every queued request (the
        scheduler's round), else behind them, in the order calls came."""
        queued: Future[T] = (
            self._executor.submit_first(self.call, fn, *args)
            if first
            else self._executor.submit(self.call, fn, *args)
        )
        future = asyncio.wrap_future(queued)
        if self.is_sqlite or self.timeouts.answer_seconds <= 0:
            return await future
        while True:
            done, _ = await asyncio.wait({future}, timeout=STALL_CHECK_SECONDS)
            if done:
                return future.result()
            silent = self.stalled()
            if silent is not None and not await self.answers():
                future.cancel()
                raise Unavailable(
                    f"the database has not answered for {silent:.0f} s (stopped or "
                    "overloaded); a change sent now may not have been made. Try again in "
                    f"{RETRY_AFTER_SECONDS} s or later (a submission with the same "
                    "Idempotency-Key is made once)",
                    retry_after=RETRY_AFTER_SECONDS,
                )

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        # A probe hanging on a frozen server ends by its connect_timeout; not waited for.
        self._probe_executor.shutdown(wait=False)
        self.engine.dispose()
        if self._probe_engine is not None:
            self._probe_engine.dispose()
