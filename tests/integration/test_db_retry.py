"""`Database.call` runs a transaction again after a deadlock (issue 14, item 6):
two real PostgreSQL transactions lock two rows in opposite orders, one is
chosen as the deadlock victim, and both end up committed, each once."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from pg_server import Postgres
from sqlalchemy import text
from sqlmodel import Session

from schedulearn.server.db import Database


@pytest.mark.postgres
def test_a_deadlock_victim_is_run_again_and_both_commit(postgres_server: Postgres) -> None:
    database = Database(postgres_server.new_database())
    try:
        with database.engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)"))
            conn.execute(text("INSERT INTO t VALUES (1, 0), (2, 0)"))
        both_hold_one = threading.Barrier(2)
        tries: Counter[int] = Counter()

        def transfer(first: int, second: int) -> None:
            def fn(session: Session) -> None:
                tries[first] += 1
                session.execute(text("UPDATE t SET v = v + 1 WHERE id = :i"), {"i": first})
                if tries[first] == 1:  # the first try of each waits, so they cross
                    both_hold_one.wait(timeout=30)
                session.execute(text("UPDATE t SET v = v + 1 WHERE id = :i"), {"i": second})
                session.commit()

            database.call(fn)

        threads = [threading.Thread(target=transfer, args=a) for a in ((1, 2), (2, 1))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        with database.engine.connect() as conn:
            values: dict[int, int] = dict(conn.execute(text("SELECT id, v FROM t")).tuples().all())
        assert values == {1: 2, 2: 2}  # each transaction committed exactly once
        assert sum(tries.values()) == 3  # the victim ran twice
    finally:
        database.close()
