"""The wire schema of a protocol version: what is checked in, and how two compare.

A protocol version's wire is its calls (method and path of every `/api/`
route, with the query and header parameters, the request body and the
reply each one takes) and the JSON Schema of every model those reach.
`compact` cuts it out of the server's OpenAPI document, leaving out what
no peer can notice (titles, descriptions, examples, error replies, the
protocol header itself), so a reworded docstring is not a wire change.

One file per version is checked in, `wire/protocol-<N>.json` next to this
module (shipped in the wheel: a CLI or agent reads an older server's file
to know what that server takes). `scripts/wire-schema` writes the current
version's; `tests/unit/test_wire_schema.py` fails when the live wire and
the file differ. Each file also records its history: the digest of the
wire when the version was made, then one note per compatible change made
to it since (`notes`, each with the digest of the wire it produced), so a
file edited without a note no longer matches its own record.

`changes(old, new)` lists what differs, each change judged compatible or
not: compatible means no peer of the same version can notice it (a reply
gains a field with a default, a call's documentation changes). Anything
else (a call or a request field added, a field removed, a type changed, a
value added to an enum) needs a new protocol version.

Standard library only: the CLI imports it without pydantic.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

Schema = dict[str, Any]

API = "/api/"
_METHODS = ("get", "post", "put", "patch", "delete")
_REF = "#/components/schemas/"
# Keys of a JSON Schema that only document: a change to them is no wire change.
_DOCS = frozenset({"title", "description", "examples", "example"})
# Keys whose value is a mapping of names to schemas (walked, names kept).
_NAMED = frozenset({"properties", "$defs", "patternProperties"})
# The protocol header is every call's: the version says it, not the schema.
_UNRECORDED_PARAMETERS = frozenset({"schedulearn-protocol"})


def compact(openapi: Schema) -> Schema:
    """The wire part of a server's OpenAPI document: `{"calls": ..., "models": ...}`."""
    calls: Schema = {}
    for path, operations in sorted(openapi.get("paths", {}).items()):
        if not path.startswith(API):
            continue
        for method in _METHODS:
            operation = operations.get(method)
            if operation is not None:
                calls[f"{method.upper()} {path}"] = _call(operation)
    components = openapi.get("components", {}).get("schemas", {})
    models: Schema = {}
    wanted = sorted(_refs(calls))
    while wanted:
        name = wanted.pop()
        if name in models or name not in components:
            continue
        models[name] = _strip(components[name])
        wanted.extend(_refs(models[name]) - models.keys())
    return {"calls": calls, "models": dict(sorted(models.items()))}


def _call(operation: Schema) -> Schema:
    call: Schema = {}
    params: Schema = {}
    for p in operation.get("parameters", []):
        if p["in"] == "cookie" or p["name"].lower() in _UNRECORDED_PARAMETERS:
            continue
        params[f"{p['in']}:{p['name']}"] = {
            "required": bool(p.get("required", False)),
            "schema": _strip(p.get("schema", {})),
        }
    if params:
        call["params"] = dict(sorted(params.items()))
    body = operation.get("requestBody")
    if body is not None:
        call["body"] = {
            "required": bool(body.get("required", False)),
            "content": {
                kind: _strip(media.get("schema", {}))
                for kind, media in sorted(body.get("content", {}).items())
            },
        }
    for status, reply in sorted(operation.get("responses", {}).items()):
        if status.startswith("2"):
            call["reply"] = {
                "status": int(status),
                "content": {
                    kind: _strip(media.get("schema", {}))
                    for kind, media in sorted(reply.get("content", {}).items())
                },
            }
            break
    return call


def _strip(schema: object) -> Any:
    """`schema` without documentation, its `$ref`s shortened to model names."""
    if isinstance(schema, list):
        return [_strip(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: Schema = {}
    for key, value in schema.items():
        if key in _DOCS:
            continue
        if key == "$ref" and isinstance(value, str) and value.startswith(_REF):
            out[key] = value[len(_REF) :]
        elif key in _NAMED and isinstance(value, dict):
            out[key] = {name: _strip(sub) for name, sub in value.items()}
        elif key == "default":
            out[key] = value  # a value, not a schema: kept whole
        else:
            out[key] = _strip(value)
    return out


def _refs(schema: object) -> set[str]:
    if isinstance(schema, list):
        return set().union(*(_refs(s) for s in schema)) if schema else set()
    if not isinstance(schema, dict):
        return set()
    found = {schema["$ref"]} if isinstance(schema.get("$ref"), str) else set()
    for key, value in schema.items():
        if key != "default":
            found |= _refs(value)
    return found


def digest(wire: Schema) -> str:
    """A fingerprint of a wire (`calls` and `models`), for a file's record."""
    text = json.dumps({"calls": wire["calls"], "models": wire["models"]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- the checked-in files ------------------------------------------------------


def file_name(version: int) -> str:
    return f"protocol-{version}.json"


@cache
def checked_in(version: int) -> Schema | None:
    """The checked-in wire of `version` (None when there is no file for it)."""
    folder = resources.files("schedulearn") / "wire"
    entry = folder / file_name(version)
    if not entry.is_file():
        return None
    loaded: Schema = json.loads(entry.read_text(encoding="utf-8"))
    return loaded


def record_problem(wire: Schema) -> str | None:
    """Why a checked-in file does not match its own record (None when it does)."""
    notes = wire.get("notes", [])
    expected = notes[-1]["digest"] if notes else wire.get("made")
    actual = digest(wire)
    if expected == actual:
        return None
    return (
        f"protocol-{wire.get('protocol')}.json was edited by hand: its calls and models "
        f"have digest {actual}, its record says {expected}; a wire changes through "
        "scripts/wire-schema only (a new version, or --note for a compatible change)"
    )


# --- comparing two wires ---------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One difference between two wires, and whether a peer could notice it."""

    where: str
    what: str
    compatible: bool

    def __str__(self) -> str:
        kind = "compatible" if self.compatible else "needs a new protocol version"
        return f"{self.where}: {self.what} ({kind})"


def changes(old: Schema, new: Schema) -> list[Change]:
    """What changed from wire `old` to wire `new` (both `compact` forms)."""
    found: list[Change] = []
    replies, requests = roles(new)
    old_calls, new_calls = old["calls"], new["calls"]
    for call in sorted(old_calls.keys() - new_calls.keys()):
        found.append(Change(call, "call removed", False))
    for call in sorted(new_calls.keys() - old_calls.keys()):
        found.append(Change(call, "call added", False))
    for call in sorted(old_calls.keys() & new_calls.keys()):
        if old_calls[call] != new_calls[call]:
            found.append(Change(call, _differs(old_calls[call], new_calls[call]), False))
    old_models, new_models = old["models"], new["models"]
    for name in sorted(old_models.keys() - new_models.keys()):
        found.append(Change(name, "model no longer used", False))
    for name in sorted(new_models.keys() - old_models.keys()):
        # A new model reaches the wire through a change listed elsewhere (a field
        # or a call); on its own it is compatible.
        found.append(Change(name, "model added", True))
    for name in sorted(old_models.keys() & new_models.keys()):
        found.extend(
            _model_changes(name, old_models[name], new_models[name], name in requests, replies)
        )
    return found


def _differs(old: Schema, new: Schema) -> str:
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    return f"{', '.join(keys)} changed"


def _model_changes(
    name: str, old: Schema, new: Schema, in_request: bool, replies: set[str]
) -> list[Change]:
    if old == new:
        return []
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    rest_old = {k: v for k, v in old.items() if k not in ("properties", "required")}
    rest_new = {k: v for k, v in new.items() if k not in ("properties", "required")}
    found: list[Change] = []
    if rest_old != rest_new:
        found.append(Change(name, _differs(rest_old, rest_new), False))
    required_old, required_new = set(old.get("required", [])), set(new.get("required", []))
    for field in sorted(old_props.keys() - new_props.keys()):
        found.append(Change(f"{name}.{field}", "field removed", False))
    for field in sorted(new_props.keys() - old_props.keys()):
        if in_request:
            # An older server of this version refuses it (requests forbid unknown fields).
            found.append(Change(f"{name}.{field}", "request field added", False))
        elif field in required_new:
            # A newer client cannot read an older server's reply without it.
            found.append(Change(f"{name}.{field}", "required reply field added", False))
        else:
            found.append(Change(f"{name}.{field}", "reply field added, with a default", True))
    for field in sorted(old_props.keys() & new_props.keys()):
        if old_props[field] != new_props[field]:
            found.append(Change(f"{name}.{field}", "type or default changed", False))
        elif (field in required_old) != (field in required_new):
            found.append(Change(f"{name}.{field}", "required or optional now", False))
    if not found and name not in replies and not in_request:
        found.append(Change(name, "changed", False))
    return found


def roles(wire: Schema) -> tuple[set[str], set[str]]:
    """The models reachable from replies, and from requests (bodies and parameters)."""
    models = wire["models"]

    def closure(start: set[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(start)
        while todo:
            name = todo.pop()
            if name in seen or name not in models:
                continue
            seen.add(name)
            todo.extend(_refs(models[name]))
        return seen

    replies: set[str] = set()
    requests: set[str] = set()
    for call in wire["calls"].values():
        replies |= _refs(call.get("reply", {}))
        requests |= _refs(call.get("body", {})) | _refs(call.get("params", {}))
    return closure(replies), closure(requests)
