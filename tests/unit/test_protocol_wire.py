"""The wire's upgrade rules: replies ignore fields they do not know, requests
refuse them, every model is one or the other, and the protocol version check."""

from __future__ import annotations

import inspect
import typing

import pytest
from pydantic import BaseModel, ValidationError

from schedulearn import protocol
from schedulearn.protocol import (
    OLDEST_PROTOCOL,
    PROTOCOL_VERSION,
    UNVERSIONED_PROTOCOL,
    JobList,
    JobSpec,
    NodeRegistration,
    WorkBatch,
    protocol_refusal,
)
from schedulearn.server.app import create_app
from schedulearn.settings import ServerSettings

_MODELS = [
    cls
    for _, cls in inspect.getmembers(protocol, inspect.isclass)
    if issubclass(cls, BaseModel) and cls.__module__ == protocol.__name__
]
_BASES = {protocol._Wire, protocol._Request, protocol._RequestPart, protocol._Reply}


def _job(**extra: object) -> dict[str, object]:
    job: dict[str, object] = {
        "id": 7, "name": "j", "user": "u", "state": "running", "command": ["true"],
        "image": None, "gpus": 1, "min_gpus": None, "max_gpus": None, "cpus": 0.0,
        "memory_gb": 0.0, "gpu_type": None, "priority": 0, "deadline": None,
        "estimated_duration": None, "model": None, "preemptible": False, "env": {},
        "workdir": None, "shm_size": None, "launcher": "none", "array_id": None,
        "array_index": None, "max_restarts": 3, "restarts": 0, "attempt": 1,
        "submitted_at": 1.0, "started_at": 2.0, "ended_at": None, "exit_code": None,
        "message": "", "placement": {"n1": [0]},
        "progress": {"at": 3.0, "step": 10},
    }  # fmt: skip
    return {**job, **extra}


def test_every_wire_model_is_either_a_request_or_a_reply() -> None:
    assert len(_MODELS) > 40
    unclassified = [
        m.__name__
        for m in _MODELS
        if m not in _BASES
        and not issubclass(m, protocol._Request | protocol._RequestPart | protocol._Reply)
    ]
    assert unclassified == []
    # A reply may share a request's fields by deriving from it (ProgressPublic);
    # it is still a reply.
    for model in _MODELS:
        if model in _BASES:
            continue
        expected = "ignore" if issubclass(model, protocol._Reply) else "forbid"
        assert model.model_config.get("extra") == expected, model.__name__


def _models_in(annotation: object) -> set[type]:
    """The wire models an annotation names, inside lists, dicts, unions, Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    return {m for arg in typing.get_args(annotation) for m in _models_in(arg)}


def test_a_request_part_is_reached_only_from_inside_a_request() -> None:
    """A part has no NUL walk of its own (the request holding it walks it), so
    it must never be a request itself: no route takes one as its body, and
    only requests (and other parts) hold one."""
    parts = {m for m in _MODELS if issubclass(m, protocol._RequestPart)} - _BASES
    assert protocol.LogLine in parts
    for model in _MODELS:
        held = {m for f in model.model_fields.values() for m in _models_in(f.annotation)}
        if held & parts:
            assert issubclass(model, protocol._Request | protocol._RequestPart), model.__name__
    schema = create_app(ServerSettings()).openapi()
    bodies = {
        media["schema"].get("$ref", "").rpartition("/")[2]
        for path in schema["paths"].values()
        for operation in path.values()
        for media in operation.get("requestBody", {}).get("content", {}).values()
    }
    assert {"LogBatch", "EventBatch"} <= bodies
    assert not bodies & {part.__name__ for part in parts}


def test_a_reply_with_fields_this_release_does_not_know_parses() -> None:
    body = {
        "items": [_job(team_budget="gpu-a", progress={"at": 3.0, "step": 10, "phase": "warmup"})]
    }
    page = JobList.model_validate({**body, "total": 1, "offset": 0, "limit": 100, "cursor": "x"})
    assert page.items[0].id == 7
    assert page.items[0].progress is not None and page.items[0].progress.step == 10
    assert not hasattr(page.items[0], "team_budget")
    # The agent's side: a work batch from a newer server, down to the nested models.
    batch = WorkBatch.model_validate_json(
        '{"starts": [{"job_id": 1, "attempt": 1, "command": "true", "sandbox": "gvisor",'
        ' "gang": {"world_size": 2, "node_rank": 0, "master_addr": "a", "master_port": 1,'
        ' "nproc_per_node": 1, "backend": "nccl"}}], "stops": [], "drain": true}'
    )
    assert batch.starts[0].gang is not None and batch.starts[0].gang.world_size == 2


def test_a_request_with_a_field_it_does_not_have_is_refused() -> None:
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({"command": "python train.py", "gpu": 2})
    assert "gpu" in str(refused.value) and "Extra inputs are not permitted" in str(refused.value)
    # Also nested inside a request.
    with pytest.raises(ValidationError) as nested:
        NodeRegistration.model_validate({"name": "n1", "gpus": [{"index": 0, "vram": 80}]})
    assert "gpus.0.vram" in str(nested.value)


@pytest.mark.parametrize(
    "batch",
    [
        {
            "attempt": 1,
            "lines": [{"seq": 1, "text": "ok", "at": 1.0}, {"seq": 2, "text": "a\x00", "at": 1.0}],
        },
        {"attempt": 1, "node": "n\x00", "lines": []},
    ],
)
def test_nul_anywhere_in_a_request_is_refused(batch: dict[str, object]) -> None:
    """The outermost model checks all its data once (the lines inside skip it),
    so a NUL deep inside is refused as surely as one at the top."""
    with pytest.raises(ValidationError, match="NUL"):
        protocol.LogBatch.model_validate(batch)


def test_nul_in_a_dict_key_is_refused() -> None:
    with pytest.raises(ValidationError, match="NUL"):
        protocol.JobSpec.model_validate({"command": ["true"], "env": {"K\x00": "v"}})


def test_a_refusal_from_inside_leaves_the_next_model_fully_checked() -> None:
    """A field refused after the outermost model's walk (inside `handler`)
    must not leave the models validated next marked as checked."""
    with pytest.raises(ValidationError, match="seq"):
        protocol.LogBatch.model_validate(
            {"attempt": 1, "lines": [{"seq": "x", "text": "", "at": 1}]}
        )
    with pytest.raises(ValidationError, match="NUL"):
        protocol.GpuInfo.model_validate({"index": 0, "type": "\x00"})
    assert protocol.LogBatch.model_validate(
        {"attempt": 1, "lines": [{"seq": 1, "text": "x", "at": 1}]}
    )


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (protocol.LogBatch, rb'{"attempt": 1, "lines": [{"seq": 1, "text": "a\u0000", "at": 1}]}'),
        (protocol.LogBatch, rb'{"attempt": 1, "node": "\u0000", "lines": []}'),
        (JobSpec, rb'{"command": ["true"], "env": {"K\u0000": "v"}}'),
        (JobSpec, rb'{"command": ["true\u0000"]}'),
    ],
)
def test_a_nul_escaped_in_a_json_request_is_refused(
    model: type[protocol.LogBatch | JobSpec], body: bytes
) -> None:
    with pytest.raises(ValidationError, match="NUL"):
        protocol.request_from_json(model, body)


def test_a_json_request_without_a_nul_reads_as_validation_gives_it() -> None:
    # The escape of a backslash before `u0000` is text, not a NUL; a raw NUL
    # byte and an upper-case escape are no JSON at all.
    body = rb'{"attempt": 1, "lines": [{"seq": 1, "text": "\\u0000 and \u00e9", "at": 1}]}'
    batch = protocol.request_from_json(protocol.LogBatch, body)
    assert batch == protocol.LogBatch.model_validate_json(body)
    assert batch.lines[0].text == "\\u0000 and \u00e9"
    for not_json in (
        b'{"attempt": 1, "node": "\x00", "lines": []}',
        rb'{"attempt": 1, "node": "\U0000", "lines": []}',
    ):
        with pytest.raises(ValidationError, match="json_invalid"):
            protocol.request_from_json(protocol.LogBatch, not_json)
    # What it skips is only the walk: the next validation walks as usual.
    with pytest.raises(ValidationError, match="NUL"):
        protocol.GpuInfo.model_validate({"index": 0, "type": "\x00"})


def test_the_progress_a_job_reports_is_strict_and_the_progress_shown_is_not() -> None:
    with pytest.raises(ValidationError):
        protocol.ProgressReport.model_validate({"at": 1.0, "phase": "warmup"})
    shown = protocol.ProgressPublic.model_validate({"at": 1.0, "phase": "warmup"})
    assert isinstance(shown, protocol.ProgressReport) and shown.at == 1.0


def test_the_server_serves_its_own_version_and_every_older_one_it_speaks() -> None:
    assert OLDEST_PROTOCOL <= UNVERSIONED_PROTOCOL <= PROTOCOL_VERSION
    for version in range(OLDEST_PROTOCOL, PROTOCOL_VERSION + 1):
        assert protocol_refusal(str(version), "agent") is None
    assert protocol_refusal(f" {PROTOCOL_VERSION} ", "CLI") is None
    # No header: an older client (or curl), taken as the unversioned protocol.
    assert protocol_refusal(None, "CLI") is None


def test_an_older_client_than_the_server_speaks_is_told_to_upgrade_itself() -> None:
    old = OLDEST_PROTOCOL - 1
    message = protocol_refusal(str(old), "agent")
    assert message == (
        f"this agent speaks protocol {old}, this server speaks "
        f"{OLDEST_PROTOCOL}..{PROTOCOL_VERSION}; upgrade the agent"
    )


def test_a_newer_client_than_the_server_is_told_to_upgrade_the_server() -> None:
    new = PROTOCOL_VERSION + 1
    message = protocol_refusal(str(new), "CLI")
    assert message is not None
    assert message.startswith(
        f"this CLI speaks protocol {new}, this server speaks {OLDEST_PROTOCOL}..{PROTOCOL_VERSION}"
    )
    assert "upgrade the server" in message


def test_a_malformed_version_says_what_to_send() -> None:
    message = protocol_refusal("two", "CLI")
    assert message is not None
    assert "Schedulearn-Protocol header must be a whole number" in message and "'two'" in message
