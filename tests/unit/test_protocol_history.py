"""Replies to clients of protocol 1, which refuse unknown fields: the fields
added since are left out (`protocol_history`), by the server's middleware
too, for JSON bodies and for the log stream's events. The "newer release"
here is a model that derives from this one's and adds a field."""

from __future__ import annotations

import json
from collections.abc import Iterator

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient

from schedulearn import protocol
from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from schedulearn.protocol_history import REPLY_FIELDS, downgrade, needs_downgrade
from schedulearn.server.versioning import ProtocolCheck


class JobPublic(protocol.JobPublic):
    """This release's JobPublic with a field a later release added."""

    queue: str = "gpu-a"


class JobList(protocol.JobList):
    # Narrowed on purpose: FastAPI then sends the later release's field too.
    items: list[JobPublic]  # type: ignore[assignment]  # a list of the subclass


def _job(**extra: object) -> dict[str, object]:
    job: dict[str, object] = {
        "id": 7, "name": "j", "user": "u", "state": "running", "command": ["true"],
        "image": None, "gpus": 1, "min_gpus": None, "max_gpus": None, "cpus": 0.0,
        "memory_gb": 0.0, "gpu_type": None, "priority": 0, "deadline": None,
        "estimated_duration": None, "model": None, "preemptible": False,
        "env": {"queue": "kept: a key of env, not a field"}, "workdir": None,
        "shm_size": None, "launcher": "none", "array_id": None, "array_index": None,
        "max_restarts": 3, "restarts": 0, "attempt": 1, "submitted_at": 1.0,
        "started_at": 2.0, "ended_at": None, "exit_code": None, "message": "",
        "placement": {"n1": [0]}, "progress": {"at": 3.0, "step": 10},
    }  # fmt: skip
    return {**job, **extra}


def test_a_field_protocol_1_lacks_is_left_out_at_every_depth_and_nothing_else() -> None:
    page = JobList(items=[JobPublic.model_validate(_job())], total=1, offset=0, limit=10)
    data = json.loads(page.model_dump_json())
    assert data["items"][0]["queue"] == "gpu-a"
    old = downgrade(JobList, data, 1)
    assert isinstance(old, dict)
    assert "queue" not in old["items"][0]
    assert old["items"][0]["env"] == {"queue": "kept: a key of env, not a field"}
    v1 = REPLY_FIELDS[1]["JobPublic"]
    expected = {k: v for k, v in data["items"][0].items() if k in v1}
    # Nested too: the progress report's fields added since (goodput) are left out.
    v1_progress = REPLY_FIELDS[1]["ProgressPublic"]
    expected["progress"] = {k: v for k, v in expected["progress"].items() if k in v1_progress}
    assert "goodput" in data["items"][0]["progress"] and "goodput" not in expected["progress"]
    assert expected == old["items"][0]
    # What protocol 1's own model makes of it: it parses (it refused the field).
    protocol.JobList.model_validate(old)


def test_hidden_details_reach_protocol_1_as_empty_values_it_accepts() -> None:
    # Protocol 1 required command, env and message; a job whose details are
    # hidden from the caller has them null, which a 0.1.0 CLI would refuse.
    hidden = _job(command=None, env=None, message=None, details_hidden=True)
    data = json.loads(protocol.JobPublic.model_validate(hidden).model_dump_json())
    old = downgrade(protocol.JobPublic, data, 1)
    assert isinstance(old, dict)
    assert (old["command"], old["env"], old["message"]) == ("", {}, "")
    assert "details_hidden" not in old
    assert set(old) <= REPLY_FIELDS[1]["JobPublic"]
    # A job shown whole keeps its values.
    whole = json.loads(protocol.JobPublic.model_validate(_job()).model_dump_json())
    shown = downgrade(protocol.JobPublic, whole, 1)
    assert isinstance(shown, dict) and shown["command"] == ["true"]


def test_only_models_that_gained_a_field_are_rewritten() -> None:
    assert needs_downgrade(JobPublic, 1) and needs_downgrade(JobList, 1)
    assert not needs_downgrade(protocol.LogPage, 1)
    # Clients of this release ignore unknown fields: nothing to leave out for them.
    assert PROTOCOL_VERSION not in REPLY_FIELDS
    assert not needs_downgrade(JobPublic, PROTOCOL_VERSION)


def test_protocol_1s_table_names_only_reply_models_this_release_still_has() -> None:
    for name in REPLY_FIELDS[1]:
        model = getattr(protocol, name)
        assert issubclass(model, protocol._Reply) or name == "ProgressReport", name


def _app() -> FastAPI:
    app = FastAPI()
    app.add_middleware(ProtocolCheck)

    @app.get("/api/v1/jobs", response_model=JobList)
    async def jobs() -> JobList:
        return JobList(items=[JobPublic.model_validate(_job())], total=1, offset=0, limit=10)

    @app.get("/api/v1/jobs/7/logs")
    async def follow() -> StreamingResponse:
        line = protocol.LogLinePublic(
            seq=1, attempt=1, stream=protocol.LogStream.STDOUT, text="hi", at=1.0
        )
        end = JobPublic.model_validate(_job())

        def events() -> Iterator[str]:
            yield f"id: 1\nevent: line\ndata: {line.model_dump_json()}\n\n"
            yield f"event: end\ndata: {end.model_dump_json()}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def test_the_server_leaves_the_field_out_for_a_protocol_1_client_only() -> None:
    with TestClient(_app()) as client:
        old = client.get("/api/v1/jobs")  # no header: protocol 1
        new = client.get("/api/v1/jobs", headers={PROTOCOL_HEADER: str(PROTOCOL_VERSION)})
    assert old.status_code == new.status_code == 200
    assert "queue" not in old.json()["items"][0]
    assert int(old.headers["content-length"]) == len(old.content)
    protocol.JobList.model_validate(old.json())
    assert new.json()["items"][0]["queue"] == "gpu-a"


def test_the_log_streams_end_event_is_rewritten_for_a_protocol_1_client() -> None:
    with TestClient(_app()) as client:
        old = client.get("/api/v1/jobs/7/logs").text
        new = client.get(
            "/api/v1/jobs/7/logs", headers={PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
        ).text
    end = old.split("event: end\ndata: ")[1].split("\n")[0]
    assert "queue" not in json.loads(end)
    protocol.JobPublic.model_validate_json(end)
    assert '"text":"hi"' in old
    assert json.loads(new.split("event: end\ndata: ")[1].split("\n")[0])["queue"] == "gpu-a"


def test_a_protocol_1_agent_gets_secret_env_folded_into_env() -> None:
    start = protocol.Assignment(
        job_id=3, attempt=1, command="true", env={"A": "1"}, secret_env={"TOKEN": "s"}
    )
    old = downgrade(protocol.Assignment, json.loads(start.model_dump_json()), 1)
    assert isinstance(old, dict)
    assert old["env"] == {"A": "1", "TOKEN": "s"} and "secret_env" not in old
    # Protocol 2 agents know no secret_env either (protocol-2.json; test_compat_visibility
    # ran one): folded too, the field left in (they ignore unknown fields).
    two = downgrade(protocol.Assignment, json.loads(start.model_dump_json()), 2)
    assert isinstance(two, dict) and two["env"] == {"A": "1", "TOKEN": "s"}
    # Protocol 3 agents get it apart, as sent.
    sent = json.loads(start.model_dump_json())
    assert downgrade(protocol.Assignment, sent, 3) == sent


def test_a_timeout_reaches_clients_of_protocols_1_and_2_as_failed() -> None:
    # Protocol 3 added the state; 1 and 2 refuse a value their enum lacks.
    ended = protocol.JobPublic.model_validate(_job(state="timeout", message="stopped at..."))
    page = protocol.JobList(items=[ended], total=1, offset=0, limit=10)
    for version in (1, 2):
        assert needs_downgrade(protocol.JobList, version)
        old = downgrade(protocol.JobList, json.loads(page.model_dump_json()), version)
        assert isinstance(old, dict) and old["items"][0]["state"] == "failed"
        steps = protocol.JobHistory(
            job_id=7,
            transitions=[
                protocol.TransitionPublic(
                    at=1.0, from_state=protocol.JobState.RUNNING,
                    to_state=protocol.JobState.TIMEOUT, attempt=1, message="",
                )
            ],
        )  # fmt: skip
        told = downgrade(protocol.JobHistory, json.loads(steps.model_dump_json()), version)
        assert isinstance(told, dict)
        assert told["transitions"][0]["to_state"] == "failed"
        assert told["transitions"][0]["from_state"] == "running"
    now = downgrade(protocol.JobList, json.loads(page.model_dump_json()), PROTOCOL_VERSION)
    assert isinstance(now, dict) and now["items"][0]["state"] == "timeout"
