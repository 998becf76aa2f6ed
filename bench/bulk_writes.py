"""What the server's set-based writes cost, through SQLAlchemy or `server.bulk`.

A scheduling pass, an event batch and every batch of job moves write
many rows of one statement. This times the three most written (a job's
history row, a job part, a part's status update) for batches of 1, 10
and 50 rows, on a real SQLite database (the embedded default) migrated to
the newest revision: each batch once through `Connection.execute(stmt,
rows)` (SQLAlchemy's executemany) and once through
`bulk.execute_many`, alternated, inside a transaction rolled back after
each batch. Prints microseconds a batch and a row, the machine and its
single-core speed (bench/machine.py); asserts nothing.

    uv run python bench/bulk_writes.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from machine import describe, speed_line
from sqlalchemy import Connection, bindparam
from sqlalchemy.sql.dml import UpdateBase

from schedulearn.protocol import JobState
from schedulearn.server.bulk import execute_many
from schedulearn.server.db import Database, migrate
from schedulearn.server.models import JobPart, JobTransition, PartStatus

PARTS = JobPart.__table__
SET_STATUS = (
    PARTS.update()
    .where(PARTS.c.id == bindparam("w_id"), PARTS.c.status == bindparam("w_was"))
    .values(status=bindparam("v_status"), exit_code=bindparam("v_exit_code"))
)


def history(i: int) -> dict[str, Any]:
    return {
        "job_id": i,
        "at": 1.0 + i,
        "from_state": JobState.RUNNING,
        "to_state": JobState.SUCCEEDED,
        "attempt": 1,
        "message": "",
    }


def part(i: int) -> dict[str, Any]:
    return {
        "job_id": i,
        "attempt": 1,
        "node": "n1",
        "rank": 0,
        "gpus": [i % 8],
        "status": PartStatus.ASSIGNED,
        "delivered": False,
        "stop_reason": None,
        "stop_sent": False,
        "exit_code": None,
        "last_reported": 1.0,
    }


def status(i: int) -> dict[str, Any]:
    return {"w_id": i + 1, "w_was": PartStatus.RUNNING, "v_status": "exited", "v_exit_code": 0}


Writer = Callable[[Connection, UpdateBase, Sequence[dict[str, Any]]], object]


def through_sqlalchemy(conn: Connection, stmt: UpdateBase, rows: Sequence[dict[str, Any]]) -> None:
    conn.execute(stmt, list(rows))


def per_batch(
    conn: Connection, write: Writer, stmt: UpdateBase, rows: list[dict[str, Any]], n: int
) -> float:
    """CPU seconds of one batch, the best of `n` (each rolled back)."""
    best = float("inf")
    for _ in range(n):
        with conn.begin() as tx:
            start = time.process_time()
            write(conn, stmt, rows)
            best = min(best, time.process_time() - start)
            tx.rollback()
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=300, help="batches timed per figure")
    args = p.parse_args()
    print(f"machine: {describe()}")
    print(speed_line())
    root = Path(tempfile.mkdtemp(prefix="sl-bulk-"))
    db = Database(f"sqlite:///{root / 'bulk.db'}")
    migrate(db.engine)
    cases = [
        ("history row (INSERT)", JobTransition.__table__.insert(), history),
        ("job part (INSERT)", PARTS.insert(), part),
        ("part status (UPDATE)", SET_STATUS, status),
    ]
    print(
        f"{'statement':<22} {'rows':>5} {'SQLAlchemy us':>14} {'bulk us':>9} {'us a row saved':>15}"
    )
    with db.engine.connect() as conn:
        with conn.begin():  # parts for the updates to find (all running)
            conn.execute(
                PARTS.insert(), [{**part(i), "status": PartStatus.RUNNING} for i in range(50)]
            )
        for name, stmt, make in cases:
            for size in (1, 10, 50):
                rows = [make(i) for i in range(size)]
                sa = bulk = float("inf")
                for _ in range(3):  # alternated, so a slow spell of the host hits both
                    sa = min(sa, per_batch(conn, through_sqlalchemy, stmt, rows, args.repeat // 3))
                    bulk = min(bulk, per_batch(conn, execute_many, stmt, rows, args.repeat // 3))
                saved = (sa - bulk) / size * 1e6
                print(f"{name:<22} {size:>5} {sa * 1e6:>14.0f} {bulk * 1e6:>9.0f} {saved:>15.1f}")
    db.close()


if __name__ == "__main__":
    main()
