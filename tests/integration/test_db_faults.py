"""The database goes away or fills up (issue 14, item 6), with a real server process:
callers get 503 with Retry-After (not 500) and nothing is lost; /healthz
(liveness) keeps answering while /readyz (readiness) says why it is not
ready; the CLI's client retries through the outage; and once the database
is back (PostgreSQL restarted, or disk space freed) everything works again,
cancel included."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from pg_server import PG_BIN, Postgres
from served import Served
from server_api import ADMIN
from sqlalchemy import QueuePool, text
from sqlmodel import Session

from dependencies import Dependency, missing, need_root
from schedulearn.cli.client import Client
from schedulearn.protocol import JobSpec
from schedulearn.server.db import Database, Timeouts
from schedulearn.server.errors import Unavailable
from waiting import wait_until


class RestartablePostgres(Postgres):
    """A PostgreSQL of this test alone, so stopping it disturbs no other test."""

    def halt(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


def register(http: httpx.Client) -> None:
    reply = http.post(
        "/api/v1/agent/register",
        headers={"Authorization": "Bearer agent-token-for-tests"},
        json={"name": "n1", "gpus": [{"index": 0}]},
    )
    assert reply.status_code == 200, reply.text


def ids_of(http: httpx.Client) -> set[int]:
    return {job["id"] for job in http.get("/api/v1/jobs", params={"limit": 1000}).json()["items"]}


@pytest.mark.postgres
def test_postgres_stopped_and_restarted_503_then_recovery_with_nothing_lost(
    tmp_path: Path,
) -> None:
    if not (PG_BIN / "pg_ctl").exists():
        missing(Dependency.POSTGRES, f"no {PG_BIN / 'pg_ctl'}")
    pg = RestartablePostgres()
    # A node silent for 3 s is marked down; the outage below lasts longer, and
    # the node must survive it (its heartbeats could not be stored meanwhile).
    server = Served(pg.new_database(), tmp_path / "server.log", node_timeout_seconds="3")
    beating = threading.Event()
    try:
        server.start()
        with server.client(timeout=10) as http:
            register(http)
            beats = threading.Thread(target=heartbeats, args=(server.url, beating), daemon=True)
            beats.start()
            before = {http.post("/api/v1/jobs", json={"command": ["true"]}).json()["ids"][0]
                      for _ in range(3)}  # fmt: skip
            pg.halt()
            halted = time.monotonic()
            down = http.post("/api/v1/jobs", json={"command": ["true"]})
            assert down.status_code == 503, down.text
            assert int(down.headers["Retry-After"]) > 0
            assert "database is unavailable" in down.json()["error"]
            assert http.get("/healthz").status_code == 200  # alive, though not ready
            not_ready = http.get("/readyz")
            assert not_ready.status_code == 503, not_ready.text
            assert "Retry-After" in not_ready.headers

            # The CLI's client keeps trying through the outage with one key.
            submitted: list[int] = []
            with Client(server.url, ADMIN, retry_seconds=120) as client:
                thread = threading.Thread(
                    target=lambda: submitted.extend(client.submit(JobSpec(command=["true"])).ids)
                )
                thread.start()
                wait_until(lambda: "answered 503" in server.log.read_text(), 30,
                           "the client's first try to be refused")  # fmt: skip
                time.sleep(max(0.0, 5 - (time.monotonic() - halted)))  # past the node timeout
                pg.start()
                thread.join(timeout=120)
            assert len(submitted) == 1, server.log.read_text()[-3000:]
            wait_until(lambda: http.get("/readyz").status_code == 200, 30, "/readyz to say ready")
            after = ids_of(http)
            assert before | set(submitted) == after  # nothing lost, nothing doubled
            assert http.post(f"/api/v1/jobs/{submitted[0]}/cancel").status_code == 200
            # A few node timeouts after the outage: the node was never marked down.
            time.sleep(3)
            [node] = http.get("/api/v1/nodes").json()["items"]
            assert node["healthy"], node
            assert "stopped answering" not in server.log.read_text()
    finally:
        beating.set()
        server.stop()
        pg.stop()


def _postgres_pids(pg: Postgres) -> list[int]:
    """The postmaster of `pg` and every process it forked (backends, writers)."""
    master = int((pg.data / "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The field after the command's closing parenthesis: state, then ppid.
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == master:
                children.append(int(stat.parent.name))
    return [master, *children]


@pytest.mark.postgres
def test_postgres_frozen_gives_503_with_retry_after_and_readyz_says_why(tmp_path: Path) -> None:
    """SIGSTOP of every PostgreSQL process: the kernel still accepts its TCP
    connections, so nothing fails by itself (issue 33: no reply in 70 s). With
    the default timeouts a submission gets 503 with Retry-After in about 4 s
    (3 s with no answer, then a 1 s probe that gets none either)."""
    if not (PG_BIN / "pg_ctl").exists():
        missing(Dependency.POSTGRES, f"no {PG_BIN / 'pg_ctl'}")
    pg = RestartablePostgres()
    server = Served(pg.new_database(), tmp_path / "server.log")
    frozen: list[int] = []
    try:
        server.start()
        # A client that would wait far longer than the server's timeouts.
        with server.client(timeout=60) as http:
            before = http.post("/api/v1/jobs", json={"command": ["true"]}).json()["ids"]
            frozen = _postgres_pids(pg)
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            started = time.monotonic()
            down = http.post("/api/v1/jobs", json={"command": ["true"]})
            took = time.monotonic() - started
            print(f"a submission to a frozen PostgreSQL answered in {took:.2f} s")
            assert down.status_code == 503, down.text
            assert int(down.headers["Retry-After"]) > 0
            assert "database" in down.json()["error"], down.text
            assert http.get("/api/v1/jobs").status_code == 503
            assert http.get("/healthz").status_code == 200  # alive, though not ready
            not_ready = http.get("/readyz")
            assert not_ready.status_code == 503 and "Retry-After" in not_ready.headers
            assert "the database" in not_ready.json()["error"], not_ready.text
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
            frozen = []
            wait_until(lambda: http.get("/readyz").status_code == 200, 30, "/readyz to say ready")
            after = http.post("/api/v1/jobs", json={"command": ["true"]})
            assert after.status_code == 201, after.text
            assert set(before) | set(after.json()["ids"]) <= ids_of(http)
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        server.stop()
        pg.stop()


def _sleep(seconds: float) -> Callable[[Session], float]:
    def fn(session: Session) -> float:
        session.execute(text("SELECT pg_sleep(:s)"), {"s": seconds})
        return seconds

    return fn


@pytest.mark.postgres
def test_a_statement_past_statement_timeout_is_503_with_retry_after(
    postgres_server: Postgres,
) -> None:
    """PostgreSQL cancels it (SQLSTATE 57014, query_canceled): the request's
    path (`Database.run`) says Unavailable, which the API answers 503 with
    Retry-After, not 500 "internal error"."""
    database = Database(postgres_server.new_database(), Timeouts(statement_seconds=1))
    try:
        with pytest.raises(Unavailable) as raised:
            asyncio.run(database.run(_sleep(3)))
        assert raised.value.retry_after > 0
        assert "did not answer in time" in raised.value.message
        assert "statement timeout" in raised.value.message, raised.value.message
        assert asyncio.run(database.run(_sleep(0))) == 0  # the database itself is fine
    finally:
        database.close()


@pytest.mark.postgres
def test_one_slow_query_on_a_healthy_postgres_is_answered_not_503(
    postgres_server: Postgres,
) -> None:
    """A query longer than `answer_seconds`, with nothing else finishing meanwhile,
    is slow, not stalled: the database answers a probe, so the request waits for
    its result (under the statement timeout) instead of getting 503."""
    database = Database(
        postgres_server.new_database(), Timeouts(answer_seconds=1, statement_seconds=30)
    )
    try:
        assert asyncio.run(database.run(_sleep(3))) == 3
    finally:
        database.close()


@pytest.mark.postgres
def test_no_pooled_connection_free_in_time_is_503_with_retry_after(
    postgres_server: Postgres,
) -> None:
    """Every connection of the pool held elsewhere (the pool waits `answer_seconds`, at least 4 s,
    for one): SQLAlchemy's pool TimeoutError is Unavailable, not a 500."""
    database = Database(postgres_server.new_database(), Timeouts(answer_seconds=1))
    try:
        with contextlib.ExitStack() as held:
            pool = database.engine.pool
            assert isinstance(pool, QueuePool), pool
            # QueuePool has no public getter for its overflow limit.
            while pool.checkedout() < pool.size() + pool._max_overflow:
                held.enter_context(database.engine.connect())
            with pytest.raises(Unavailable) as raised:
                database.call(_sleep(0))
            assert raised.value.retry_after > 0
            assert "did not answer in time" in raised.value.message, raised.value.message
        assert database.call(_sleep(0)) == 0  # connections free again: it works
    finally:
        database.close()


def heartbeats(url: str, stop: threading.Event) -> None:
    """An agent's heartbeats: every 0.5 s, and 2 s after one fails (an agent backs off)."""
    pause = 0.5
    with httpx.Client(base_url=url, timeout=5) as http:
        while not stop.wait(pause):
            try:
                ok = http.post(
                    "/api/v1/agent/heartbeat",
                    headers={"Authorization": "Bearer agent-token-for-tests"},
                    json={"name": "n1"},
                ).is_success
            except httpx.HTTPError:
                ok = False
            pause = 0.5 if ok else 2.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, so the database's disk fills up for real."""
    need_root("mounting a small tmpfs")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk is full; returns it (delete it to free the space)."""
    filler = disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as out:
        while True:
            out.write(b"\0" * 4096)
    return filler


def test_sqlite_on_a_full_disk_answers_503_and_cancel_works_once_space_is_freed(
    small_disk: Path, tmp_path: Path
) -> None:
    server = Served(f"sqlite:///{small_disk / 'schedulearn.db'}", tmp_path / "server.log")
    try:
        server.start()
        with server.client(timeout=10) as http:
            register(http)
            [job] = http.post("/api/v1/jobs", json={"command": ["true"]}).json()["ids"]
            filler = fill(small_disk)
            big = {"command": ["true"], "env": {f"K{i}": "v" * 200 for i in range(200)}}
            statuses = []
            for _ in range(50):  # the pages left in the file and the WAL are used up first
                reply = http.post("/api/v1/jobs", json=big)
                statuses.append(reply.status_code)
                if reply.status_code != 201:
                    break
            assert reply.status_code == 503, (statuses, reply.text)
            assert "database is full" in reply.json()["error"]
            assert int(reply.headers["Retry-After"]) > 0
            filler.unlink()
            cancelled = http.post(f"/api/v1/jobs/{job}/cancel")
            assert cancelled.status_code == 200, cancelled.text
            assert cancelled.json()["state"] == "cancelled"
            assert http.post("/api/v1/jobs", json={"command": ["true"]}).status_code == 201
    finally:
        server.stop()
