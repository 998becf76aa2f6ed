"""Command-line values of plain types, converted without pydantic.

Typer (0.29) converts every parameter through a pydantic `TypeAdapter`,
built the first time the parameter is processed, even for a `--help` flag
left out. Importing pydantic and building adapters takes longer than the
whole start-up a command may take (issue 15: at most 0.3 s), and most of
our parameters are plain: `str`, `int`, `float`, `bool`, or a list of
these. `install` gives each such parameter a converter that returns what
Typer's adapter returns for a well-formed value and hands every other value
(a malformed number, a string for a flag) to Typer's own adapter, built
then, so errors read exactly as Typer writes them. Parameters of any other
type (paths, enums, files, numbers with bounds, custom parsers) keep
Typer's converter, built only when a value comes: one left out reads as
None (or an empty tuple), as Typer reads it, so an option such as
`simulate --json PATH` costs nothing when it is not given.

This relies on one internal of Typer: a parameter asks its
`_runtime_param` (built by `get_runtime_param` when None) to `coerce`
each value. Where that is not there (another Typer), `install` changes
nothing and Typer converts as before; tests/unit/cli/test_params.py says
so, and the start-up tests notice pydantic coming back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, get_args, get_origin

if TYPE_CHECKING:
    from typer._click import Context
    from typer._click.core import Command, Parameter

_MISSING = object()
# Only the plainest spellings are converted here; `1_000`, ` 5`, `+5`, `1e3`,
# `inf` and the like go to Typer's adapter, which decides as it always has.
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")


def _plain(value: Any, kind: type) -> Any:
    """`value` as Typer's adapter for `kind` would return it, or _MISSING."""
    if kind is str:
        return value if type(value) is str else _MISSING
    if kind is bool:
        return value if type(value) is bool else _MISSING
    if kind is int:
        if type(value) is int:
            return value
        if type(value) is str and _INT.fullmatch(value):
            return int(value)
        return _MISSING
    if kind is float:
        if type(value) is float:
            return value
        if type(value) is int:
            return float(value)
        if type(value) is str and _FLOAT.fullmatch(value):
            return float(value)
        return _MISSING
    return _MISSING


def plain_kind(param: Parameter) -> tuple[type, bool] | None:
    """(type, is a list) of a Typer parameter this module converts, else None."""
    descriptor = getattr(param, "type_descriptor", None)
    info = getattr(descriptor, "parameter_info", None)
    if descriptor is None or info is None or descriptor.file_annotation is not None:
        return None
    if getattr(info, "parser", None) is not None:
        return None
    annotation = descriptor.annotation
    many = get_origin(annotation) is list
    if many:
        (annotation,) = get_args(annotation) or (None,)
    if annotation not in (str, bool, int, float):
        return None
    if annotation in (int, float) and (info.min is not None or info.max is not None):
        return None
    return annotation, many


class TyperLater:
    """The converter of a parameter of any other type (what Typer's
    `_runtime_param` is): a value left out reads as Typer's `RuntimeParam.coerce`
    reads it; any other value goes to Typer's own converter, built then."""

    def convert(self, value: Any) -> Any:
        """Nothing is converted here: Typer's adapter decides."""
        return _MISSING

    def coerce(self, value: Any, param: Any, ctx: Context) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:
            # What Typer's RuntimeParam.coerce returns for a value left out.
            return () if multi else None
        if not (multi and isinstance(value, str)):
            converted = self.convert(value)
            if converted is not _MISSING:
                return converted
        # Anything else: Typer's own converter (pydantic), from now on.
        from typer._coercion import build_runtime_param

        param._runtime_param = build_runtime_param(param.type_descriptor)
        return param._runtime_param.coerce(value, param=param, ctx=ctx)


class PlainValue(TyperLater):
    """The converter of one plain parameter."""

    def __init__(self, kind: type, many: bool) -> None:
        self.kind = kind
        self.many = many

    def convert(self, value: Any) -> Any:
        """The converted value, or _MISSING when Typer's adapter must decide."""
        if not self.many:
            return _plain(value, self.kind)
        if not isinstance(value, list | tuple):
            return _MISSING
        items = [_plain(v, self.kind) for v in value]
        return _MISSING if any(i is _MISSING for i in items) else items


def install(params: Iterable[Parameter]) -> None:
    """Give each plain Typer parameter of `params` a pydantic-free converter,
    and every other one a converter that builds Typer's when a value comes."""
    for param in params:
        if getattr(param, "_runtime_param", _MISSING) is not None:
            continue  # not a Typer parameter, another Typer, or already set
        if getattr(param, "type_descriptor", None) is None:
            continue  # not the Typer this module knows
        kind = plain_kind(param)
        later = TyperLater() if kind is None else PlainValue(*kind)
        param._runtime_param = later  # type: ignore[attr-defined]  # Typer's slot


def install_tree(command: Command, ctx: Context) -> None:
    """`install` on a command's parameters (its help option included) and,
    for a group, on those of every command under it."""
    install(command.get_params(ctx))
    for sub in getattr(command, "commands", {}).values():
        install_tree(sub, ctx)
