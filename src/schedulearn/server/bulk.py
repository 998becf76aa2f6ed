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
SQLAlchemy reads and sorts one by one.

On PostgreSQL an INSERT's rows go as one statement over arrays, a column
each (`INSERT ... SELECT FROM unnest(...) WITH ORDINALITY ORDER BY`),
whatever their number: its text is the same for every batch, so psycopg
parses it once and PostgreSQL plans it once. An executemany sent one
INSERT a row, and SQLAlchemy's RETURNING form (one INSERT of all the
rows' VALUES) made a new text for each number of rows, longer than
psycopg keeps parsed: it re-parsed each submission's (49 columns a row),
16% of the server's CPU under `bench/api_load.py` on PostgreSQL (py-spy).
UPDATEs and DELETEs stay an executemany, whose count is what each row
changed.

Only for statements built once (module constants, cached builders): the
compiled form is kept for the life of the process, keyed by the statement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnClause, Connection, Insert
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
    if isinstance(stmt, Insert) and conn.dialect.name == "postgresql":
        unnest = _unnest(stmt, conn, tuple(sorted(rows[0])), returning=False)
        return int(conn.exec_driver_sql(unnest.sql, unnest.params(rows)).rowcount)
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
    if conn.dialect.name == "postgresql":
        unnest = _unnest(stmt, conn, tuple(sorted(rows[0])), returning=True)
        done = conn.exec_driver_sql(unnest.sql, unnest.params(rows))
        # The key's sequence numbers the rows in the order the SELECT gives
        # them (ORDER BY their place): the rule SQLAlchemy's own RETURNING in
        # parameter order rests on for PostgreSQL (its dialect's
        # `insertmanyvalues_implicit_sentinel`, ANY_AUTOINCREMENT with
        # INSERT..SELECT..ORDER BY). RETURNING itself promises no order.
        return sorted(int(i) for i in done.scalars())
    execute_many(conn, stmt, rows)  # SQLite, the other backend
    # Within one write transaction SQLite numbers each new row one past the
    # largest key so far (https://sqlite.org/autoinc.html; it picks at random
    # only once a key has reached 2**63 - 1), so one statement's rows have
    # consecutive ids ending at the last one it inserted.
    last = int(conn.exec_driver_sql("SELECT last_insert_rowid()").scalar_one())
    return list(range(last - len(rows) + 1, last + 1))


@dataclass(frozen=True, slots=True)
class _Unnest:
    """A plain INSERT as one statement over one array a column (PostgreSQL)."""

    sql: str
    # (column key, what turns a row's value into the array's), in the SQL's order.
    columns: tuple[tuple[str, Processor | None], ...]

    def params(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list[Any], ...]:
        return tuple(
            [r[k] for r in rows] if p is None else [p(r[k]) for r in rows] for k, p in self.columns
        )


_UNNESTS: dict[tuple[Insert, tuple[str, ...], bool], _Unnest] = {}


def _unnest(stmt: Insert, conn: Connection, keys: tuple[str, ...], returning: bool) -> _Unnest:
    found = _UNNESTS.get((stmt, keys, returning))
    if found is not None:
        return found
    if stmt._values or stmt._multi_values or stmt.select is not None or stmt._returning:
        raise ValueError("only a table's plain INSERT (table.insert()) goes over arrays")
    # The row's parameters and their bind processing, checked as for any statement.
    binds = _compiled(stmt, conn, keys).binds
    dialect, table = conn.dialect, stmt.table
    quote = dialect.identifier_preparer.quote
    columns = [table.c[name] for name, _, _ in binds]
    names = [f"c{i}" for i in range(len(columns))]  # short: psycopg keeps texts under 4 KB parsed
    arrays = ", ".join(f"%s::{c.type.compile(dialect=dialect)}[]" for c in columns)
    sql = (
        f"INSERT INTO {dialect.identifier_preparer.format_table(table)} "
        f"({', '.join(quote(c.name) for c in columns)}) SELECT {', '.join(names)} "
        f"FROM unnest({arrays}) WITH ORDINALITY AS r({', '.join(names)}, n) ORDER BY r.n"
    )
    if returning:
        (key,) = table.primary_key.columns  # type: ignore[attr-defined]  # an Insert's table is a Table
        sql += f" RETURNING {quote(key.name)}"
    made = _Unnest(
        sql,
        tuple(
            (name, _for_array(column, processor))
            for (name, _, processor), column in zip(binds, columns, strict=True)
        ),
    )
    _UNNESTS[(stmt, keys, returning)] = made
    return made


def _for_array(column: ColumnClause[Any], processor: Processor | None) -> Processor | None:
    """What a value needs to go in `column`'s array: its bind processing and, for
    a float column, ints made floats (psycopg dumps no list of mixed types)."""
    try:
        floats = column.type.python_type is float
    except NotImplementedError:
        floats = False
    if not floats:
        return processor
    if processor is None:
        return _as_float
    return lambda value: _as_float(processor(value))


def _as_float(value: Any) -> Any:
    return float(value) if type(value) is int else value
