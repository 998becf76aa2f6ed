"""The pydantic-free replies of `cli.replies` read what the wire models of
`schedulearn.protocol` read: the same field names and types, the same
values from one reply, and a refusal where the models refuse. The client's
copies of the protocol constants match, and the CLI config file reads as
before.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from schedulearn import protocol
from schedulearn.cli import client, config
from schedulearn.cli.replies import Identity, JobRow, JobRows, ReplyError

PAIRS: list[tuple[type[Any], type[Any]]] = [
    (JobRow, protocol.JobPublic),
    (JobRows, protocol.JobList),
    (Identity, protocol.WhoAmI),
]


def _job(**changes: Any) -> dict[str, Any]:
    spec = protocol.JobSpec(command=["python", "train.py"], gpus=2, name="sweep")
    data = protocol.JobPublic(
        id=7,
        name="sweep",
        user="ada",
        state=protocol.JobState.RUNNING,
        command=spec.command,
        image=None,
        gpus=2,
        min_gpus=None,
        max_gpus=None,
        cpus=1.0,
        memory_gb=4.0,
        gpu_type=None,
        priority=3,
        deadline=None,
        estimated_duration=600.0,
        model=None,
        preemptible=True,
        env={"A": "1"},
        workdir=None,
        shm_size=None,
        launcher=protocol.Launcher.NONE,
        array_id=5,
        array_index=2,
        max_restarts=0,
        restarts=0,
        attempt=1,
        submitted_at=1_700_000_000.5,
        started_at=1_700_000_010,
        ended_at=None,
        exit_code=None,
        message=None,
        placement={"n1": [0, 1]},
        predicted_end_at=1_700_000_700.0,
    ).model_dump(mode="json")
    data.update(changes)
    return data


def _comparable(hint: Any) -> Any:
    """A type annotation with the wire models' enums and models as plain data."""
    if hint is protocol.JobState:
        return str
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return frozenset(_comparable(a) for a in typing.get_args(hint))
    if origin is not None:
        return (origin, tuple(_comparable(a) for a in typing.get_args(hint)))
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return "model"
    return hint


@pytest.mark.parametrize(("light", "model"), PAIRS)
def test_fields_are_the_models_with_the_same_types(light: type[Any], model: type[Any]) -> None:
    hints = typing.get_type_hints(light)
    for field in dataclasses.fields(light):
        assert field.name in model.model_fields, f"{model.__name__} has no {field.name}"
        wanted = _comparable(model.model_fields[field.name].annotation)
        got = _comparable(hints[field.name])
        if light is JobRows and field.name == "items":
            wanted, got = "items", "items"
        assert got == wanted, field.name


def test_a_job_list_reads_the_same_values_as_the_wire_model() -> None:
    page = {"items": [_job(), _job(id=8, command="echo hi", placement=None)], "total": 9}
    page |= {"offset": 0, "limit": 2}
    rows = JobRows.from_json(json.loads(json.dumps(page)))
    full = protocol.JobList.model_validate(page)
    assert (rows.total, rows.offset, rows.limit) == (full.total, full.offset, full.limit)
    assert len(rows.items) == 2
    for row, job in zip(rows.items, full.items, strict=True):
        for field in dataclasses.fields(JobRow):
            assert getattr(row, field.name) == getattr(job, field.name), field.name
    assert rows.items[0].state == "running" and rows.items[0].submitted_at == 1_700_000_000.5
    assert isinstance(rows.items[0].started_at, float)


def test_whoami_reads_the_same_values_as_the_wire_model() -> None:
    data = {"user": "ada", "role": "user", "priority_min": -5, "priority_max": 10, "new": 1}
    assert dataclasses.asdict(Identity.from_json(data)) == protocol.WhoAmI.model_validate(
        data
    ).model_dump(mode="json")
    assert Identity.from_json({"user": "ada", "role": "admin"}).priority_max is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"id": 7.5}, "id"),
        ({"id": None}, "id"),
        ({"gpus": None}, "gpus"),
        ({"name": 5}, "name"),
        ({"submitted_at": float("nan")}, "submitted_at"),
        ({"command": [1, 2]}, "command"),
        ({"placement": {"n1": [0.5]}}, "placement"),
        ({"details_hidden": 3}, "details_hidden"),
    ],
)
def test_a_job_the_models_refuse_is_refused_naming_the_field(
    changes: dict[str, Any], field: str
) -> None:
    data = _job(**changes)
    with pytest.raises(ValueError):
        protocol.JobPublic.model_validate(data)
    with pytest.raises(ReplyError, match=repr(field)):
        JobRow.from_json(data)


def test_nul_in_a_reply_is_read_as_sent_by_both() -> None:
    """NUL is refused in requests (`protocol._Request`), where text enters;
    replies are not walked for it, by the model or by the lean reader."""
    data = _job(name="a\x00b", command=["echo", "\x00"])
    assert protocol.JobPublic.model_validate(data).name == "a\x00b"
    row = JobRow.from_json(data)
    assert (row.name, row.command) == ("a\x00b", ["echo", "\x00"])


def test_a_missing_field_is_named() -> None:
    data = _job()
    del data["user"]
    with pytest.raises(ReplyError, match="'user' is missing"):
        JobRow.from_json(data)
    with pytest.raises(ReplyError, match="expected a JSON object"):
        JobRows.from_json([])


def test_the_clients_protocol_constants_are_the_protocols() -> None:
    assert client.API_PREFIX == protocol.API_PREFIX
    assert client.PROTOCOL_HEADER == protocol.PROTOCOL_HEADER
    assert client.PROTOCOL_VERSION == protocol.PROTOCOL_VERSION
    assert client.SERVER_PROTOCOL_HEADER == protocol.SERVER_PROTOCOL_HEADER


def test_the_cli_config_file_reads_and_writes(tmp_path: Path) -> None:
    path = tmp_path / "cli.json"
    assert config.load_file(path) == config.CliConfig()
    saved = config.CliConfig(server="http://h:1", token="t")
    config.save(saved, path)
    assert config.load_file(path) == saved
    assert path.stat().st_mode & 0o777 == 0o600
    path.write_text(json.dumps({"server": "http://h:2", "future_key": [1]}))
    assert config.load_file(path) == config.CliConfig(server="http://h:2")
    for bad in ("[]", "{", '{"server": null}', '{"token": 5}'):
        path.write_text(bad)
        with pytest.raises(SystemExit, match="not a valid CLI config"):
            config.load_file(path)
