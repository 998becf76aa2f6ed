"""Policy options from text (`fifo:backfill=true`) to the types the policy declares.

A policy's options are its constructor's keyword parameters; their type
annotations say what text each accepts. A value that does not fit is
refused with a message naming the option and what it takes
(`fifo: backfill takes true or false, not 'maybe'`), the same in the CLI,
the API and the web page, because all three build policies through
`registry.create`.
"""

from __future__ import annotations

import enum
import inspect
import math
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


class UnknownPolicyError(ValueError):
    """A policy name or option that does not exist; the message lists valid ones."""


class PolicyOptionError(UnknownPolicyError):
    """An option value a policy cannot take; the message says what it takes."""


def declared_types(cls: type[Any]) -> dict[str, Any]:
    """The annotated type of each constructor option (Any where none is declared)."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except (NameError, TypeError):  # an annotation naming what this module cannot see
        hints = {}
    params = inspect.signature(cls).parameters.values()
    return {p.name: hints.get(p.name, Any) for p in params if p.kind in _NAMED}


_NAMED = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def describe(kind: Any) -> str:
    """What text an option of type `kind` takes, for help and for errors."""
    if kind is bool:
        return "true or false"
    if kind is int:
        return "a whole number"
    if kind is float:
        return "a number"
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in kind)
    if get_origin(kind) is Literal:
        return "one of " + ", ".join(str(v) for v in get_args(kind))
    if _is_union(kind):
        return " or ".join("none" if k is type(None) else describe(k) for k in get_args(kind))
    return "text"


def convert(policy: str, option: str, raw: str, kind: Any) -> Any:
    """`raw` as a value of `kind`; PolicyOptionError naming what the option takes."""
    try:
        return _convert(raw.strip(), kind)
    except ValueError:
        raise PolicyOptionError(
            f"policy {policy!r}: option {option} takes {describe(kind)}, not {raw!r}"
        ) from None


def _convert(raw: str, kind: Any) -> Any:
    if kind is bool:
        lowered = raw.lower()
        if lowered in _TRUE or lowered in _FALSE:
            return lowered in _TRUE
        raise ValueError(raw)
    if kind is int:
        return int(raw)
    if kind is float:
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError(raw)
        return value
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(raw)
    if get_origin(kind) is Literal:
        for allowed in get_args(kind):
            if str(allowed) == raw:
                return allowed
        raise ValueError(raw)
    if _is_union(kind):
        if type(None) in get_args(kind) and raw.lower() == "none":
            return None  # the policy's own default, when it is None
        # Text last: `float | str` takes 600 as a number and "600,3600" as text.
        members = sorted(get_args(kind), key=lambda k: k is str)
        for member in members:
            if member is type(None) or not _is_text_convertible(member):
                continue
            try:
                return _convert(raw, member)
            except ValueError:
                continue
        raise ValueError(raw)
    if kind is Any:
        return guess(raw)
    return raw  # str, or a type text cannot give: the policy checks it


def guess(raw: str) -> Any:
    """An undeclared option's value: a boolean, a number, or the text."""
    lowered = raw.lower()
    if lowered in _TRUE - {"1"} or lowered in _FALSE - {"0"}:
        return lowered in _TRUE
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def _is_union(kind: Any) -> bool:
    return get_origin(kind) in (Union, types.UnionType)


def _is_text_convertible(kind: Any) -> bool:
    plain = kind in (bool, int, float, str)
    return (
        plain
        or get_origin(kind) is Literal
        or (isinstance(kind, type) and issubclass(kind, enum.Enum))
    )
