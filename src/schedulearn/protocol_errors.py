"""How a request's validation errors read to a person.

Pydantic says "Extra inputs are not permitted" for a field a request does
not have, which leaves the user guessing what the field is called. `explain`
rewrites that one error to name the closest valid field (by `difflib`) and
list every valid one, walking nested models so a typo inside a part of the
request is matched against that part's fields. Other errors pass unchanged.

The CLI uses it on a job file before sending, and the server on a job spec
it is sent, so both say the same.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Sequence

from pydantic import BaseModel
from pydantic_core import ErrorDetails


def explain(model: type[BaseModel], errors: Sequence[ErrorDetails]) -> list[ErrorDetails]:
    """`errors` from validating `model`, each unknown field's message naming the valid ones."""
    out: list[ErrorDetails] = []
    for err in errors:
        if err["type"] == "extra_forbidden" and err["loc"]:
            owner = _model_at(model, err["loc"][:-1])
            if owner is not None:
                message = unknown_field(str(err["loc"][-1]), _field_names(owner))
                err = ErrorDetails(
                    type=err["type"], loc=err["loc"], msg=message, input=err["input"]
                )
        out.append(err)
    return out


def unknown_field(name: str, valid: Sequence[str]) -> str:
    """'unknown field 'gpu' (did you mean 'gpus'?); valid fields: a, b, c'."""
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown field {name!r}{hint}; valid fields: {', '.join(sorted(valid))}"


def _field_names(model: type[BaseModel]) -> list[str]:
    # A request is validated by alias where a field has one, so that is its name.
    return [field.alias or name for name, field in model.model_fields.items()]


def _model_at(model: type[BaseModel], path: Sequence[int | str]) -> type[BaseModel] | None:
    """The model whose fields the error at `path` is about, or None when the
    path goes through something that is not a model (a union of models, say)."""
    current: object = model
    for step in path:
        if isinstance(step, int):
            current = _item_type(current)
        elif isinstance(current, type) and issubclass(current, BaseModel):
            field = _field_by_name(current, step)
            current = _model_in(field.annotation) if field is not None else None
        else:
            current = None
        if current is None:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _field_by_name(model: type[BaseModel], name: str) -> typing.Any:
    for key, field in model.model_fields.items():
        if name in (key, field.alias):
            return field
    return None


def _item_type(annotation: object) -> object:
    """The element type of `list[X]` (or `X | None` around one), else None."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (list, tuple, set, frozenset) and args:
        return _model_in(args[0]) or args[0]
    if len(args) == 1:
        return _item_type(args[0])
    return None


def _model_in(annotation: object) -> object:
    """`annotation` itself when it is a model, or the one model of an
    `X | None` or list of models; otherwise the annotation unchanged, for
    `_item_type` to look into."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) not in (list, tuple, set, frozenset) and len(args) == 1:
        return _model_in(args[0])
    return annotation
