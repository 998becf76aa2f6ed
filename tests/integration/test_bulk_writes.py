"""`server.bulk.execute_many` writes what SQLAlchemy's own executemany would.

On each backend (SQLite; PostgreSQL too with SCHEDULEARN_TEST_POSTGRES):
the rows read back equal those written through `Connection.execute`,
with the columns' bind processing applied (an enum kept as its value, a
JSON list, a float given as an int); an UPDATE's count is the rows it
changed, also where the driver cannot count an executemany's rows (then
the rows go one at a time); rows that do not name the statement's
parameters are refused. `insert_ids` gives each inserted row its own id,
in order, also after the table's last rows were deleted and beside rows
another statement of the same transaction inserted. A job row (every
column type the server writes: JSON objects and lists, text that an array
literal must quote, a column NULL in every row) reads back as SQLAlchemy
writes it. A batch's rows go as one statement (an executemany on SQLite,
one INSERT over arrays on PostgreSQL) whose text is the same for any
number of rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, bindparam, event, select

from schedulearn.protocol import JobState
from schedulearn.server.bulk import execute_many, insert_ids
from schedulearn.server.db import Database
from schedulearn.server.models import Job, JobPart, PartStatus

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


JOBS = Job.__table__
ADD_JOB = JOBS.insert()
# Text an array literal must quote or escape, or that reads as its NULL.
AWKWARD = ['say "hi", {then} \\ go', "NULL", "", "é ✓ 日本"]


def job(i: int) -> dict[str, Any]:
    """A job row naming every column; `deadline` is NULL in every row."""
    row: dict[str, Any] = {c.name: None for c in JOBS.columns if c.name != "id"}
    row.update(
        name=AWKWARD[i % len(AWKWARD)],
        user=f"u{i}",
        gpus=i % 3,
        cpus=i,  # an int for a float column
        memory_gb=1.5 if i % 2 else 2,  # ints and floats in one column
        priority=-i,
        preemptible=bool(i % 2),
        held=False,
        state=JobState.PENDING if i % 2 else "running",
        command=["python", "-c", AWKWARD[i % len(AWKWARD)]],
        env={"A": AWKWARD[(i + 1) % len(AWKWARD)], "N": str(i)},
        secret_env={},
        constraints=[],
        queue="default",
        executor="subprocess",
        launcher="none",
        max_restarts=0,
        restarts=0,
        node_losses=0,
        attempt=0,
        submitted_at=1e9 + i,
        queued_at=1e9 + i,
        service_seconds=0,
        attained_gpu_seconds=0.25,
        preemptions=0,
        migrations=0,
        resizes=0,
        progress={"epoch": i, "loss": None, "nested": {"a": [1, 2.5, "x"]}},
        message=AWKWARD[(i + 2) % len(AWKWARD)],
    )
    return row


def jobs_of(conn: Connection, ids: list[int]) -> list[tuple[object, ...]]:
    found = conn.execute(
        select(*(c for c in JOBS.columns if c.name != "id"))
        .where(JOBS.c.id.in_(ids))
        .order_by(JOBS.c.id)
    )
    return [tuple(r) for r in found]


def test_a_job_row_reads_back_as_sqlalchemy_writes_it(conn: Connection) -> None:
    rows = [job(i) for i in range(12)]
    with conn.begin():
        ours = insert_ids(conn, ADD_JOB, rows)
        theirs = [
            int(r[0])
            for r in conn.execute(ADD_JOB.returning(JOBS.c.id), [job(i) for i in range(12)])
        ]
    assert jobs_of(conn, ours) == jobs_of(conn, theirs)
    back = jobs_of(conn, ours)
    names = [c.name for c in JOBS.columns if c.name != "id"]
    commands = [dict(zip(names, r, strict=True))["command"] for r in back]
    assert [c[2] for c in commands if isinstance(c, list)] == [
        AWKWARD[i % len(AWKWARD)] for i in range(12)
    ]
    assert {dict(zip(names, r, strict=True))["deadline"] for r in back} == {None}


def test_a_batch_is_one_statement_whose_text_does_not_depend_on_its_size(
    conn: Connection,
) -> None:
    # One INSERT a batch (on SQLite one executemany; on PostgreSQL one statement
    # over arrays), the same text for 1 row as for 40: built once, parsed and
    # planned once. SQLAlchemy's RETURNING made one text for each number of rows.
    sent: list[str] = []

    def record(*args: Any) -> None:
        statement = args[2]  # (conn, cursor, statement, parameters, context, executemany)
        if statement.startswith("INSERT"):
            sent.append(statement)

    event.listen(conn, "before_cursor_execute", record)
    try:
        with conn.begin():
            one = insert_ids(conn, ADD_JOB, [job(0)])
            many = insert_ids(conn, ADD_JOB, [job(i) for i in range(1, 41)])
            execute_many(conn, ADD, [part(i, "running", [i]) for i in range(3)])
            execute_many(conn, ADD, [part(i, "running", [i]) for i in range(30)])
    finally:
        event.remove(conn, "before_cursor_execute", record)
    assert len(one) == 1 and len(many) == 40
    assert len(sent) == 4
    assert sent[0] == sent[1] and sent[2] == sent[3]
