"""The declared job and node fields, as the server stores them.

`core.views.JobView` and `NodeView` declare every scheduling field once,
each with its `Role` (see docs/adding-a-field.md). This module derives
from them, by name:

- `column`: the column of one stored field, which the table models'
  blocks of declared fields (written by `server.fieldcode`) call;
- `ViewReader`: rows (column tuples or ORM objects) to views, with the
  column list built from the field names, so a pass reads thousands of
  jobs without the ORM and never by position.

A new field's column reaches existing databases through an Alembic
revision that `scripts/new-field` generates (`server.fieldmigration`);
the server changes a schema only by running the revisions.

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
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from pydantic import TypeAdapter
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field

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


def is_json(annotation: Any) -> bool:
    """Is a field of this type kept in a JSON column (not a scalar or a str enum)?"""
    return _column_type(annotation) is sa.JSON


def column(view: type, name: str) -> Any:
    """The column of the stored field `name` of `view`, as a SQLModel `Field`.

    The table models' blocks of declared fields (written by
    `server.fieldcode`) call it: the column's type, nullability and the
    default old rows got when it was added follow the declaration.
    """
    if name not in declared(view, *STORED):
        raise KeyError(f"{view.__name__} declares no stored field {name!r}")
    f = {f.name: f for f in dataclasses.fields(view)}[name]
    annotation = _hints(view)[name]
    _, nullable = unwrap(annotation)
    default = _default(f)
    kwargs: dict[str, Any] = {"nullable": nullable}
    column_type = _column_type(annotation)
    if column_type is not None:
        kwargs["sa_type"] = column_type
    server = _server_default(default, annotation)
    if server is not None:
        kwargs["sa_column_kwargs"] = {"server_default": server}
    if default is dataclasses.MISSING:
        default = ...  # required
    elif column_type is sa.JSON:
        default = _dump(annotation, default)
    return Field(default=default, **kwargs)


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
        missing = [n for n in self.names if n not in table.c]
        if missing:
            raise LookupError(
                f"the {table.name} table has no column for the declared field(s) "
                f"{', '.join(missing)} of {view.__name__}: run scripts/new-field "
                "(docs/adding-a-field.md)"
            )
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
