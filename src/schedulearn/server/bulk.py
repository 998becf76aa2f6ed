"""Many rows of one statement, handed to the database driver ready-made.

The hot paths write their rows set-based: a pass's starts, an event
batch's parts and freed GPUs, every batch of job moves and their history
rows (`states.transition_many`). Given a list of rows, SQLAlchemy's
`Connection.execute` builds each row's parameters through the compiled
statement's general machinery. On a machine of this project's kind that
costs 15-30 us a statement and 2-4 us a row more than this module does
(`bench/bulk_writes.py`), in the statements that are the server's largest
cost under `bench/api_load.py` (py-spy). `execute_many` compiles a
statement once per dialect and set of columns, keeps the types' bind
processors (enums to their values, JSON to text: exactly what SQLAlchemy
would apply), and passes the rows through `exec_driver_sql`, which keeps
SQLAlchemy's error wrapping, events and transaction.

`insert_ids` does the same for an INSERT whose new rows' ids the caller
needs (a submission's jobs). On SQLite the ids come from the database's
own rule for a table's integer key, not from RETURNING, whose rows
SQLAlchemy reads and sorts one by one; elsewhere it is SQLAlchemy's
RETURNING in parameter order.

Only for statements built once (module constants, cached builders): the
compiled form is kept for the life of the process, keyed by the statement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Insert
from sqlalchemy.sql.dml import UpdateBase

Processor = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    # (parameter name, the name in the SQL, its bind processor or None), in the driver's order.
    binds: tuple[tuple[str, str, Processor | None], ...]
    positional: bool

    def row(self, values: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        if self.positional:
            return tuple(values[n] if p is None else p(values[n]) for n, _, p in self.binds)
        return {s: values[n] if p is None else p(values[n]) for n, s, p in self.binds}


_COMPILED: dict[tuple[UpdateBase, str, tuple[str, ...]], _Compiled] = {}


def _compiled(stmt: UpdateBase, conn: Connection, keys: tuple[str, ...]) -> _Compiled:
    found = _COMPILED.get((stmt, conn.dialect.name, keys))
    if found is not None:
        return found
    compiled = stmt.compile(dialect=conn.dialect, column_keys=list(keys))
    if compiled.positional:
        names: Sequence[str] = compiled.positiontup or ()
    else:
        names = list(compiled.bind_names.values())
    if set(names) != set(keys):
        raise ValueError(
            f"execute_many takes rows that name exactly the statement's parameters "
            f"({sorted(names)}), not {sorted(keys)}"
        )
    binds = []
    for name in names:
        # What SQLAlchemy itself applies to each row (a sequence: a tuple type, not used here).
        processor = compiled._bind_processors.get(name)
        if processor is not None and not callable(processor):
            raise ValueError(f"execute_many does not take tuple-typed parameters ({name})")
        # A named parameter as the SQL spells it (escaped where the name needs it).
        binds.append((name, compiled.escaped_bind_names.get(name, name), processor))
    made = _Compiled(compiled.string, tuple(binds), bool(compiled.positional))
    _COMPILED[(stmt, conn.dialect.name, keys)] = made
    return made


def execute_many(conn: Connection, stmt: UpdateBase, rows: Sequence[Mapping[str, Any]]) -> int:
    """Run the INSERT, UPDATE or DELETE `stmt` once per row (one executemany); every
    row names the same parameters. Returns the number of rows changed: where the
    driver cannot count an executemany's rows, the rows go one at a time."""
    if not rows:
        return 0
    compiled = _compiled(stmt, conn, tuple(sorted(rows[0])))
    params = [compiled.row(r) for r in rows]
    if conn.dialect.supports_sane_multi_rowcount or len(params) == 1:
        return int(conn.exec_driver_sql(compiled.sql, params).rowcount)
    return sum(int(conn.exec_driver_sql(compiled.sql, [p]).rowcount) for p in params)


def insert_ids(conn: Connection, stmt: Insert, rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """Insert `rows` with `stmt` (an INSERT into a table whose primary key is one
    integer column the database numbers); the new rows' ids, in the rows' order."""
    if not rows:
        return []
    if conn.dialect.name != "sqlite":
        (key,) = stmt.table.primary_key.columns  # type: ignore[attr-defined]  # an Insert's table is a Table
        done = conn.execute(stmt.returning(key, sort_by_parameter_order=True), list(rows))
        return [int(i) for i in done.scalars().all()]
    execute_many(conn, stmt, rows)
    # Within one write transaction SQLite numbers each new row one past the
    # largest key so far (https://sqlite.org/autoinc.html; it picks at random
    # only once a key has reached 2**63 - 1), so one statement's rows have
    # consecutive ids ending at the last one it inserted.
    last = int(conn.exec_driver_sql("SELECT last_insert_rowid()").scalar_one())
    return list(range(last - len(rows) + 1, last + 1))
