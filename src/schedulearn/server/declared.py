"""The declared job and node fields, as the server stores them.

`core.views.JobView` and `NodeView` declare every scheduling field once,
each with its `Role` (see docs/adding-a-field.md). This module derives
from them, by name:

- `columns_base`: a SQLModel base class with one column per stored
  field (`server.models` builds `Job` and `Node` on it; a column the
  model spells out itself wins);
- `ViewReader`: rows (column tuples or ORM objects) to views, with the
  column list built from the field names, so a pass reads thousands of
  jobs without the ORM and never by position;
- `add_missing_columns`: the migration step that adds a declared column
  an existing database lacks, so a new field needs no migration file.

Types map to columns as: int, float, str, bool and str enums to their
scalar column (nullable when the field is `X | None`); anything else
(tuples, dataclasses) to a JSON column, converted with pydantic.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from typing import Any, Generic, TypeVar, cast

import sqlalchemy as sa
from pydantic import TypeAdapter
from sqlalchemy.engine import Connection
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel
from sqlmodel.main import SQLModelMetaclass

from schedulearn.core.views import Role, declared

V = TypeVar("V")
E = TypeVar("E", bound=Enum)
STORED = (Role.SUBMITTED, Role.KEPT, Role.INTERNAL)
_SCALARS = (bool, int, float, str)


class EnumText(TypeDecorator[E]):
    """A str enum kept as text: rows read back as the enum, never a bare string
    (a VARCHAR column, so no database enum type to migrate)."""

    impl = sa.String
    cache_ok = True

    def __init__(self, enum: type[E]) -> None:
        super().__init__()
        self.enum = enum

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> E | None:
        return None if value is None else self.enum(value)


def unwrap(annotation: Any) -> tuple[Any, bool]:
    """(`X`, True) for `X | None`, else (`annotation`, False)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def is_scalar(annotation: Any) -> bool:
    inner, _ = unwrap(annotation)
    return isinstance(inner, type) and issubclass(inner, _SCALARS)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _server_default(value: Any, annotation: Any) -> Any:
    """What existing rows get when the column is added (the field's default)."""
    if value is dataclasses.MISSING or value is None:
        return None
    if isinstance(value, bool):
        return sa.true() if value else sa.false()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, int | float | str):
        return str(value)
    return json.dumps(TypeAdapter(annotation).dump_python(value, mode="json"))


def _column_type(annotation: Any) -> Any:
    inner, _ = unwrap(annotation)
    if isinstance(inner, type) and issubclass(inner, Enum) and issubclass(inner, str):
        return EnumText(inner)
    if is_scalar(inner):
        return None  # SQLModel's own mapping of the Python type
    return sa.JSON


def columns_base(view: type, name: str) -> type[SQLModel]:
    """A (non-table) SQLModel with a column for every stored field of `view`.

    The table model inherits it; a field it declares itself overrides the
    derived one (for a primary key, an index, or a different default).
    """
    hints = _hints(view)
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {"__module__": __name__, "__annotations__": annotations}
    fields = {f.name: f for f in dataclasses.fields(view)}
    for field_name in declared(view, *STORED):
        f = fields[field_name]
        annotation = hints[field_name]
        _, nullable = unwrap(annotation)
        default = _default(f)
        kwargs: dict[str, Any] = {"nullable": nullable}
        column_type = _column_type(annotation)
        if column_type is not None:
            kwargs["sa_type"] = column_type
        server = _server_default(default, annotation)
        if server is not None:
            kwargs["sa_column_kwargs"] = {"server_default": server}
        annotations[field_name] = Any if column_type is sa.JSON else annotation
        if default is dataclasses.MISSING:
            default = ...  # required
        elif column_type is sa.JSON:
            default = _dump(annotation, default)
        namespace[field_name] = Field(default=default, **kwargs)
    # The metaclass builds the model class; mypy sees only its own type.
    base = cast("type[SQLModel]", SQLModelMetaclass(name, (SQLModel,), namespace))
    return base


def _dump(annotation: Any, value: Any) -> Any:
    if value is None:
        return None
    return TypeAdapter(annotation).dump_python(value, mode="json")


class Codec:
    """Converts the JSON-stored fields of a view between view and column values."""

    def __init__(self, view: type, names: Iterable[str]) -> None:
        hints = _hints(view)
        self._adapters: dict[str, TypeAdapter[Any]] = {
            n: TypeAdapter(hints[n]) for n in names if not is_scalar(hints[n])
        }

    @property
    def json_fields(self) -> tuple[str, ...]:
        return tuple(self._adapters)

    def loader(self, name: str) -> Callable[[Any], Any]:
        return self._adapters[name].validate_python

    def dump(self, name: str, value: Any) -> Any:
        adapter = self._adapters.get(name)
        if adapter is None or value is None:
            return value
        return adapter.dump_python(value, mode="json")


class ViewReader(Generic[V]):
    """Builds views of class `view` from rows that hold its stored fields, by name.

    `columns` are the table columns in the order of `names`: select them
    (plus anything else, after them) and pass each row to `from_row`.
    `loaders` convert a column value into the view's value; JSON fields
    get a pydantic loader unless given one.
    """

    def __init__(
        self,
        view: type[V],
        table: sa.Table,
        loaders: Mapping[str, Callable[[Any], Any]] | None = None,
    ) -> None:
        self.view = view
        self.names: tuple[str, ...] = declared(view, *STORED)
        self.columns: tuple[sa.Column[Any], ...] = tuple(table.c[n] for n in self.names)
        codec = Codec(view, self.names)
        merged = {n: codec.loader(n) for n in codec.json_fields}
        merged.update(loaders or {})
        self._loaders = tuple(merged.items())

    def from_row(self, row: Sequence[Any], **computed: Any) -> V:
        """The view of `row`; `computed` gives the fields that are not stored."""
        # zip pairs each name with the column selected for it; anything
        # selected after the view's columns is left for the caller.
        values = dict(zip(self.names, row, strict=False))
        for name, load in self._loaders:
            values[name] = load(values[name])
        if computed:
            values.update(computed)
        return self.view(**values)

    def from_object(self, obj: object, **computed: Any) -> V:
        return self.from_row([getattr(obj, n) for n in self.names], **computed)


def add_missing_columns(connection: Connection, metadata: sa.MetaData) -> list[str]:
    """Add every column of `metadata` that an existing table lacks.

    Run after the Alembic migrations: a field declared in `core.views`
    becomes a column here without a migration file. Only columns that
    can be added to a table with rows qualify (nullable, or with a
    server default); any other missing column is an error that says so.
    Returns "table.column" for each column added.
    """
    inspector = sa.inspect(connection)
    existing_tables = set(inspector.get_table_names())
    added: list[str] = []
    for table in metadata.sorted_tables:
        if table.name not in existing_tables:
            continue
        have = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in have:
                continue
            if not column.nullable and column.server_default is None:
                raise RuntimeError(
                    f"column {table.name}.{column.name} is missing from the database and is "
                    "NOT NULL without a default: give the field a default (or make it "
                    "optional), or write an Alembic migration for it"
                )
            ddl = sa.schema.CreateColumn(column).compile(dialect=connection.dialect)
            table_name = connection.dialect.identifier_preparer.quote(table.name)
            connection.execute(sa.text(f"ALTER TABLE {table_name} ADD COLUMN {ddl}"))
            added.append(f"{table.name}.{column.name}")
    return added
