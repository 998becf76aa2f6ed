"""The typed code each declared job and node field gets, written into the source.

`core.views.JobView` and `NodeView` declare every scheduling field once
(docs/adding-a-field.md). The wire models (`protocol.JobSpec`,
`JobPublic`, `NodeRegistration`, `NodePublic`) and the tables
(`server.models.Job`, `Node`) carry each declared field they do not spell
out themselves as an ordinary annotated field, between two marker
comments at the end of the class body:

    # Declared on core.views.JobView: written by scripts/new-field, do not edit.
    queue: BoundedText = ""
    # End of the declared fields.

This module writes those blocks (`write`, run by `scripts/new-field`) and
says which are stale (`stale`, run by tests/unit/server/test_fieldcode.py),
so mypy and pydantic see plain fields: no model is changed at run time.
It reads the source with `ast` and never imports the modules it writes,
so a declaration the blocks do not match yet cannot stop it.

A field is spelled out by hand (and left out of the block) when the class
body above the block, or a base class in the same module, defines the
name: a field, or a property that computes it (`JobSpec.memory_gb`).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import typing
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from schedulearn.core.views import JobView, NodeView, Role, declared
from schedulearn.server.declared import STORED, is_json, unwrap

PACKAGE = Path(__file__).resolve().parents[1]
BEGIN = "# Declared on core.views.{view}: written by scripts/new-field, do not edit."
END = "# End of the declared fields."
_BEGIN = re.compile(r"^(\s*)# Declared on core\.views\.(\w+): written by scripts/new-field")


class FieldCodeError(ValueError):
    """A declaration or a source file the generator cannot write code for (says what to do)."""


@dataclass(frozen=True)
class Target:
    """A class that carries declared fields: where it is and which fields it gets."""

    path: str  # relative to the `schedulearn` package
    cls: str
    view: type
    roles: tuple[Role, ...]
    table: bool  # a table model (column types) rather than a wire model (bounded types)


TARGETS = (
    Target("protocol.py", "NodeRegistration", NodeView, (Role.SUBMITTED,), table=False),
    Target("protocol.py", "JobSpec", JobView, (Role.SUBMITTED,), table=False),
    Target("protocol.py", "JobPublic", JobView, (Role.SUBMITTED, Role.KEPT), table=False),
    Target("protocol.py", "NodePublic", NodeView, (Role.SUBMITTED, Role.KEPT), table=False),
    Target("server/models.py", "Job", JobView, STORED, table=True),
    Target("server/models.py", "Node", NodeView, STORED, table=True),
)

# How a wire model bounds a declared field's text and integers (names in protocol.py).
_WIRE_NAMES = {str: "BoundedText", int: "Small"}


def _module_names(tree: ast.Module) -> set[str]:
    """Names bound at the top level of a module (imports, classes, assignments)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.If):  # `if TYPE_CHECKING:` imports
            names.update(_module_names(ast.Module(body=node.body, type_ignores=[])))
    return names


def _type_name(kind: type, known: set[str], target: Target, field: str) -> str:
    if kind.__name__ not in known:
        raise FieldCodeError(
            f"{target.path} does not import {kind.__name__}, the type of the declared field "
            f"{target.view.__name__}.{field}: import it there (or spell the field out on "
            f"{target.cls}), then run scripts/new-field again"
        )
    return kind.__name__


def _wire_type(annotation: Any, known: set[str], target: Target, field: str) -> str:
    inner, optional = unwrap(annotation)
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    if inner in _WIRE_NAMES:
        text = _WIRE_NAMES[inner]
    elif inner in (float, bool):
        text = inner.__name__
    elif origin in (tuple, list, frozenset) and args:
        parts = ["..." if a is Ellipsis else _wire_type(a, known, target, field) for a in args]
        text = f"{origin.__name__}[{', '.join(parts)}]"
    elif isinstance(inner, type) and origin is None:
        text = _type_name(inner, known, target, field)
    else:
        raise FieldCodeError(
            f"cannot write a wire type for {target.view.__name__}.{field} ({annotation!r}): "
            f"spell the field out on {target.cls} in {target.path}"
        )
    return f"{text} | None" if optional else text


def _table_type(annotation: Any, known: set[str], target: Target, field: str) -> str:
    inner, optional = unwrap(annotation)
    if is_json(annotation):
        return "Any"  # a JSON column holds the value's JSON form (server.declared.Codec)
    text = _type_name(inner, known, target, field) if issubclass(inner, Enum) else inner.__name__
    return f"{text} | None" if optional else text


def _scalar(value: object) -> str:
    if isinstance(value, str) and '"' not in value:
        return '"' + repr(value)[1:-1].replace("\\'", "'") + '"'  # ruff format's quotes
    return repr(value)


def _literal(value: Any, target: Target, field: str) -> str:
    if isinstance(value, Enum):
        return f"{type(value).__name__}.{value.name}"
    if value is None or isinstance(value, bool | int | float | str):
        return _scalar(value)
    if isinstance(value, tuple) and all(isinstance(v, bool | int | float | str) for v in value):
        items = ", ".join(_scalar(v) for v in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    raise FieldCodeError(
        f"cannot write the default of {target.view.__name__}.{field} ({value!r}) into "
        f"{target.cls}: spell the field out there, in {target.path}"
    )


def _line(target: Target, name: str, known: set[str]) -> str:
    f = {f.name: f for f in dataclasses.fields(target.view)}[name]
    annotation = typing.get_type_hints(target.view)[name]
    if target.table:
        # The column (type, nullability, the default old rows get) follows the
        # declaration at import: server.declared.column.
        kind = _table_type(annotation, known, target, name)
        return f'{name}: {kind} = column({target.view.__name__}, "{name}")'
    kind = _wire_type(annotation, known, target, name)
    if f.default is not dataclasses.MISSING:
        return f"{name}: {kind} = {_literal(f.default, target, name)}"
    if f.default_factory is not dataclasses.MISSING:
        return f"{name}: {kind} = {_literal(f.default_factory(), target, name)}"
    return f"{name}: {kind}"


def _spelled_out(tree: ast.Module, cls: str, block: range) -> set[str]:
    """Names the class (outside the block) or a base class of this module defines."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    names: set[str] = set()
    pending = [cls]
    while pending:
        node = classes.get(pending.pop())
        if node is None:
            continue  # a base from another module (BaseModel, SQLModel)
        for item in node.body:
            if item.lineno in block:
                continue
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
            elif isinstance(item, ast.FunctionDef):
                names.add(item.name)
        pending.extend(b.id for b in node.bases if isinstance(b, ast.Name))
    return names


def _block_lines(source: str, target: Target) -> tuple[int, int, str]:
    """(first, last) line numbers (1-based, inclusive) of the target's block and its indent."""
    tree = ast.parse(source)
    lines = source.splitlines()
    at = next(
        (
            i
            for i, n in enumerate(tree.body)
            if isinstance(n, ast.ClassDef) and n.name == target.cls
        ),
        None,
    )
    if at is None:
        raise FieldCodeError(f"{target.path} has no class {target.cls}")
    # A class body's trailing comments lie after its last statement, so look up
    # to the next top-level statement (or its decorators).
    after = tree.body[at + 1] if at + 1 < len(tree.body) else None
    if after is None:
        stop = len(lines)
    else:
        decorators = getattr(after, "decorator_list", [])
        stop = min([after.lineno, *(d.lineno for d in decorators)]) - 1
    for number in range(tree.body[at].lineno, stop + 1):
        begin = _BEGIN.match(lines[number - 1])
        if begin is None:
            continue
        for end in range(number, stop + 1):
            if lines[end - 1].strip() == END:
                return number, end, begin.group(1)
        break
    raise FieldCodeError(
        f"{target.cls} in {target.path} lacks its block of declared fields: end the class "
        f"body with the two lines\n    {BEGIN.format(view=target.view.__name__)}\n    {END}"
    )


def render(source: str, target: Target) -> str:
    """`source` with the target's block written for the declarations as they are now."""
    first, last, indent = _block_lines(source, target)
    tree = ast.parse(source)
    hand = _spelled_out(tree, target.cls, range(first, last + 1))
    known = _module_names(tree)
    body = [
        _line(target, name, known)
        for name in declared(target.view, *target.roles)
        if name not in hand
    ]
    block = [BEGIN.format(view=target.view.__name__), *body, END]
    lines = source.splitlines(keepends=True)
    new = [f"{indent}{line}\n" for line in block]
    return "".join(lines[: first - 1] + new + lines[last:])


def _rendered(root: Path) -> dict[Path, tuple[str, str]]:
    """Each target file under `root`: (its text now, its text with fresh blocks)."""
    files: dict[Path, tuple[str, str]] = {}
    for target in TARGETS:
        path = root / target.path
        if path not in files:
            text = path.read_text()
            files[path] = (text, text)
        old, new = files[path]
        files[path] = (old, render(new, target))
    return files


def stale(root: Path = PACKAGE) -> list[Path]:
    """The files whose blocks of declared fields differ from what `write` would write."""
    return [path for path, (old, new) in _rendered(root).items() if old != new]


def write(root: Path = PACKAGE) -> list[Path]:
    """Write every block of declared fields; returns the files that changed."""
    changed = []
    for path, (old, new) in _rendered(root).items():
        if old != new:
            path.write_text(new)
            changed.append(path)
    return changed
