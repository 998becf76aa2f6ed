"""The wire is a checked-in record: this release's server matches the current
version's file, each file matches its own record, every call declares the
version that added it, and each version's clients keep being served and
keep serving this release's clients (`protocol_schema`, `scripts/wire-schema`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from schedulearn import protocol_schema
from schedulearn.protocol import OLDEST_PROTOCOL, PROTOCOL_VERSION
from schedulearn.protocol_calls import SINCE, since
from schedulearn.protocol_history import NOT_NULL, REPLY_FIELDS
from schedulearn.protocol_schema import Schema, changes, checked_in, digest, record_problem
from schedulearn.server import wire_schema

VERSIONS = range(1, PROTOCOL_VERSION + 1)


def _file(version: int) -> Schema:
    found = checked_in(version)
    assert found is not None, (
        f"there is no schedulearn/wire/protocol-{version}.json; write it with scripts/wire-schema"
    )
    return found


def test_the_live_wire_is_the_checked_in_wire_of_the_current_version() -> None:
    found = changes(_file(PROTOCOL_VERSION), wire_schema.live())
    assert not found, wire_schema.advice(
        protocol_schema.file_name(PROTOCOL_VERSION), found, PROTOCOL_VERSION
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_each_checked_in_file_matches_its_own_record(version: int) -> None:
    wire = _file(version)
    assert wire["protocol"] == version
    assert record_problem(wire) is None


def test_every_call_declares_the_version_that_added_it() -> None:
    current = _file(PROTOCOL_VERSION)["calls"]
    for call in current:
        first = min(v for v in VERSIONS if call in _file(v)["calls"])
        assert since(call) == first, (
            f"{call} first appears in protocol-{first}.json: declare it in "
            f'protocol_calls.SINCE as "{call}": {first}'
        )
    assert set(SINCE) <= set(current), (
        f"SINCE names calls the server lacks: {set(SINCE) - set(current)}"
    )


def _resolve(schema: Any, models: Schema) -> Any:
    while isinstance(schema, dict) and "$ref" in schema:
        schema = models.get(schema["$ref"], {})
    return schema


def _bodies(wire: Schema, call: str) -> list[Any]:
    content = wire["calls"][call].get("body", {}).get("content", {})
    return [_resolve(s, wire["models"]) for s in content.values()]


@pytest.mark.parametrize("version", range(OLDEST_PROTOCOL, PROTOCOL_VERSION))
def test_this_server_takes_every_call_of_each_older_client(version: int) -> None:
    old, new = _file(version), _file(PROTOCOL_VERSION)
    for call, spec in old["calls"].items():
        assert call in new["calls"], f"{call} of protocol {version} is gone; its clients need it"
        required = {k for k, p in new["calls"][call].get("params", {}).items() if p["required"]}
        assert required <= set(spec.get("params", {})), f"{call} requires a new parameter"
        for was, now in zip(_bodies(old, call), _bodies(new, call), strict=True):
            lost = set(was.get("properties", {})) - set(now.get("properties", {}))
            assert not lost, f"{call}: protocol {version} clients send {lost}, now refused"
            added = set(now.get("required", [])) - set(was.get("properties", {}))
            assert not added, f"{call}: a field protocol {version} clients never send is required"


def _nullable(schema: Any) -> bool:
    return any(branch == {"type": "null"} for branch in schema.get("anyOf", []))


@pytest.mark.parametrize("version", range(OLDEST_PROTOCOL, PROTOCOL_VERSION))
def test_replies_to_each_older_client_hold_what_it_requires(version: int) -> None:
    # A field an older client requires that this server may send as null needs a
    # stand-in (protocol_history.NOT_NULL), or that client cannot read the reply.
    old, new = _file(version)["models"], _file(PROTOCOL_VERSION)["models"]
    stand_ins = NOT_NULL.get(version, {})
    for name in protocol_schema.roles(_file(version))[0]:
        was, now = old[name], new.get(name, {})
        for field in was.get("required", []):
            after = now.get("properties", {}).get(field)
            if after is not None and _nullable(after) and not _nullable(was["properties"][field]):
                assert field in stand_ins.get(name, {}), (
                    f"{name}.{field} may be null now, which protocol {version} clients "
                    f"refuse: give it a stand-in in protocol_history.NOT_NULL[{version}]"
                )


def test_the_fields_protocol_1_knows_are_those_of_its_checked_in_wire() -> None:
    models = _file(1)["models"]
    # Error bodies and /healthz are no call's reply under /api/: not in the record.
    unrecorded = {"ErrorBody", "Health"}
    for name, fields in REPLY_FIELDS[1].items():
        if name in unrecorded:
            continue
        recorded = "ProgressReport" if name == "ProgressPublic" else name  # renamed in 2
        assert set(models[recorded]["properties"]) == fields, name


@pytest.mark.parametrize("version", range(OLDEST_PROTOCOL, PROTOCOL_VERSION))
def test_this_client_reads_the_replies_of_each_older_server(version: int) -> None:
    # A reply field this release requires must be in every older server's reply,
    # or this CLI and agent could not read it.
    old, new = _file(version)["models"], _file(PROTOCOL_VERSION)["models"]
    replies = protocol_schema.roles(_file(PROTOCOL_VERSION))[0]
    for name in replies & old.keys():
        required = set(new[name].get("required", []))
        missing = required - set(old[name].get("properties", {}))
        assert not missing, (
            f"{name} requires {missing}, which servers of protocol {version} do not send: "
            "give them defaults"
        )


# --- the comparison, and the generator's rules ---------------------------------------


def _wire(job: Schema, calls: Schema | None = None) -> Schema:
    calls = calls or {
        "GET /api/v1/jobs/{job_id}": {"reply": {"status": 200, "content": {"j": {"$ref": "Job"}}}},
        "POST /api/v1/jobs": {"body": {"required": True, "content": {"j": {"$ref": "Spec"}}}},
    }
    spec = {"type": "object", "properties": {"command": {"type": "string"}}}
    return {"calls": calls, "models": {"Job": job, "Spec": spec}}


JOB: Schema = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}


def test_changes_judge_what_a_peer_of_the_same_version_notices() -> None:
    base = _wire(JOB)
    with_default = _wire({**JOB, "properties": {**JOB["properties"], "queue": {"default": "q"}}})
    (added,) = changes(base, with_default)
    assert (added.where, added.compatible) == ("Job.queue", True)
    required = _wire({**with_default["models"]["Job"], "required": ["id", "queue"]})
    assert [c.compatible for c in changes(base, required)] == [False]
    request = json.loads(json.dumps(base))
    request["models"]["Spec"]["properties"]["queue"] = {"type": "string"}
    (field,) = changes(base, request)
    assert (field.where, field.what, field.compatible) == (
        "Spec.queue",
        "request field added",
        False,
    )
    more_calls = _wire(JOB, {**base["calls"], "GET /api/v1/queues": {}})
    assert [(c.what, c.compatible) for c in changes(base, more_calls)] == [("call added", False)]
    retyped = _wire({**JOB, "properties": {"id": {"type": "string"}}})
    assert [c.compatible for c in changes(base, retyped)] == [False]


REF = "#/components/schemas/"


def test_documentation_is_not_part_of_the_wire() -> None:
    def openapi(description: str) -> Schema:
        job = {**JOB, "title": "Job", "description": description}
        return {
            "paths": {
                "/api/v1/jobs": {"get": {"summary": description, "responses": {"200": {
                    "description": description,
                    "content": {"application/json": {"schema": {"$ref": REF + "Job"}}},
                }}}},
                "/ui/jobs": {"get": {"responses": {}}},
            },
            "components": {"schemas": {"Job": job, "Unused": {"type": "object"}}},
        }  # fmt: skip

    one, other = protocol_schema.compact(openapi("a job")), protocol_schema.compact(openapi("x"))
    assert one == other
    assert list(one["calls"]) == ["GET /api/v1/jobs"] and list(one["models"]) == ["Job"]


@pytest.fixture
def wire_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(wire_schema, "WIRE", tmp_path)
    return tmp_path


def test_the_generator_writes_a_new_version_and_refuses_an_unrecorded_change(
    wire_folder: Path,
) -> None:
    base = _wire(JOB)
    status, said = wire_schema.update(base, 7, None)
    assert status == 0 and "new" in said
    written = json.loads((wire_folder / "protocol-7.json").read_text())
    assert written["made"] == digest(base) and record_problem(written) is None
    assert wire_schema.update(base, 7, None) == (0, f"{wire_folder}/protocol-7.json is up to date")

    # A field a request gains needs a new version, note or not.
    request = json.loads(json.dumps(base))
    request["models"]["Spec"]["properties"]["queue"] = {"type": "string"}
    status, said = wire_schema.update(request, 7, "it is fine")
    assert status == 1 and "raise PROTOCOL_VERSION" in said and "to 8" in said
    assert "Spec.queue: request field added" in said

    # A compatible change is written only with a note, which the record keeps.
    reply = _wire({**JOB, "properties": {**JOB["properties"], "queue": {"default": "q"}}})
    status, said = wire_schema.update(reply, 7, None)
    assert status == 1 and "--note" in said
    assert wire_schema.update(reply, 7, "jobs show their queue; older clients ignore it")[0] == 0
    noted = json.loads((wire_folder / "protocol-7.json").read_text())
    assert noted["notes"] == [
        {"note": "jobs show their queue; older clients ignore it", "digest": digest(reply)}
    ]
    assert record_problem(noted) is None

    # A hand edit no longer matches the record.
    noted["models"]["Job"]["properties"]["extra"] = {"type": "integer"}
    assert "edited by hand" in str(record_problem(noted))
    (wire_folder / "protocol-7.json").write_text(json.dumps(noted))
    status, said = wire_schema.update(reply, 7, "x")
    assert status == 1 and "edited by hand" in said
