"""`server.bulk.execute_many` writes what SQLAlchemy's own executemany would.

On each backend (SQLite; PostgreSQL too with SCHEDULEARN_TEST_POSTGRES):
the rows read back equal those written through `Connection.execute`,
with the columns' bind processing applied (an enum kept as its value, a
JSON list, a float given as an int); an UPDATE's count is the rows it
changed, also where the driver cannot count an executemany's rows (then
the rows go one at a time); rows that do not name the statement's
parameters are refused. `insert_ids` gives each inserted row its own id,
in order, also after the table's last rows were deleted and beside rows
another statement of the same transaction inserted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, bindparam, select

from schedulearn.server.bulk import execute_many, insert_ids
from schedulearn.server.db import Database
from schedulearn.server.models import JobPart, PartStatus

PARTS = JobPart.__table__
ADD = PARTS.insert()
SET_STATUS = (
    PARTS.update()
    .where(PARTS.c.id == bindparam("w_id"), PARTS.c.status == bindparam("w_was"))
    .values(status=bindparam("v_status"))
)


@pytest.fixture
def conn(database_url: str) -> Iterator[Connection]:
    database = Database(database_url)
    try:
        with database.engine.connect() as connection:
            yield connection
    finally:
        database.close()


def part(job_id: int, status: PartStatus | str, gpus: list[int]) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "attempt": 1,
        "node": f"n{job_id % 3}",
        "rank": 0,
        "gpus": gpus,
        "status": status,
        "delivered": False,
        "stop_reason": None,
        "stop_sent": False,
        "exit_code": None if job_id % 2 else job_id,
        "last_reported": job_id,  # an int for a float column
    }


def rows_of(conn: Connection, job_ids: range) -> list[tuple[object, ...]]:
    found = conn.execute(
        select(*(c for c in PARTS.columns if c.name != "id"))
        .where(PARTS.c.job_id.in_(list(job_ids)))
        .order_by(PARTS.c.job_id)
    )
    return [tuple(r) for r in found]


def test_rows_read_back_as_sqlalchemy_writes_them(conn: Connection) -> None:
    rows = [part(i, PartStatus.RUNNING if i % 2 else "exited", [i, i + 1]) for i in range(10)]
    conn.execute(ADD, [{**r, "job_id": r["job_id"] + 100} for r in rows])
    assert execute_many(conn, ADD, rows) == len(rows)

    ours, theirs = rows_of(conn, range(10)), rows_of(conn, range(100, 110))
    assert len(ours) == 10
    assert [r[1:] for r in ours] == [r[1:] for r in theirs]  # all but job_id
    statuses = {r[5] for r in ours}
    assert statuses == {PartStatus.RUNNING, PartStatus.EXITED}  # read back as the enum
    assert ours[3][4] == [3, 4] and ours[3][10] == 3.0


@pytest.mark.parametrize("driver_counts", [True, False], ids=["executemany", "row-by-row"])
def test_an_update_counts_the_rows_it_changed(
    conn: Connection, driver_counts: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A driver that cannot count an executemany's rows gets them one at a time.
    monkeypatch.setattr(conn.dialect, "supports_sane_multi_rowcount", driver_counts)
    execute_many(conn, ADD, [part(i, PartStatus.ASSIGNED, []) for i in range(4)])
    ids = [r[0] for r in conn.execute(select(PARTS.c.id).order_by(PARTS.c.id))]
    wanted = [
        {"w_id": ids[0], "w_was": PartStatus.ASSIGNED, "v_status": PartStatus.RUNNING},
        {"w_id": ids[1], "w_was": PartStatus.RUNNING, "v_status": PartStatus.EXITED},  # stale
        {"w_id": ids[2], "w_was": PartStatus.ASSIGNED, "v_status": PartStatus.RUNNING},
    ]
    assert execute_many(conn, SET_STATUS, wanted) == 2
    statuses = [r[0] for r in conn.execute(select(PARTS.c.status).order_by(PARTS.c.id))]
    assert statuses == [PartStatus.RUNNING, PartStatus.ASSIGNED, PartStatus.RUNNING, "assigned"]
    assert execute_many(conn, SET_STATUS, []) == 0


def test_rows_that_do_not_name_the_parameters_are_refused(conn: Connection) -> None:
    with pytest.raises(ValueError, match="exactly the statement's parameters"):
        execute_many(conn, SET_STATUS, [{"w_id": 1, "v_status": PartStatus.RUNNING}])


def test_insert_ids_gives_each_row_its_own_id_in_order(conn: Connection) -> None:
    with conn.begin():
        before = insert_ids(conn, ADD, [part(i, "running", [i]) for i in range(5)])
        # The largest ids gone: SQLite may hand them out again, and the
        # ids said must still be the rows'.
        conn.execute(PARTS.delete().where(PARTS.c.id.in_(before[-2:])))
        conn.execute(ADD, [part(50, "running", [0])])  # another statement's row between
        rows = [part(i, "running", [i]) for i in range(100, 140)]
        ids = insert_ids(conn, ADD, rows)
    assert len(set(ids)) == len(rows)
    found = dict(conn.execute(select(PARTS.c.id, PARTS.c.job_id).where(PARTS.c.id.in_(ids))).all())
    assert [found[i] for i in ids] == [r["job_id"] for r in rows]
    assert insert_ids(conn, ADD, []) == []
