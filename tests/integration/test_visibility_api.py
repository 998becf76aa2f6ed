"""The visibility model through the API (`server.services.visibility`).

Alice's job, seen by Bob (another user), by Alice and by an admin: Bob
sees the queue facts (id, name, owner, state, GPUs, placement) but no
command, env, workdir, message, checkpoint or progress, and gets 403 for
the logs and progress history; the secret env value is in no reply to
anyone, while the agent's assignment carries it.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from httpx import Response
from server_api import Api
from wire_agent import WireAgent

from schedulearn.protocol import (
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    Assignment,
    JobPublic,
    ProgressBatch,
    ProgressReport,
    WorkBatch,
)
from schedulearn.settings import ServerSettings

SECRET = "s3cret-value-4d9f"
SPEC = {
    "name": "resnet",
    "command": ["python", "train.py", "--lr", "0.1"],
    "gpus": 1,
    "preemptible": True,
    "env": {"WANDB_API_KEY": "wandb-key-1234"},
    "secret_env": {"TOKEN": SECRET},
    "workdir": "/home/alice/project",
}


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> ServerSettings:
    from server_api import ADMIN, AGENT

    return ServerSettings(
        database_url=database_url,
        admin_token=ADMIN,
        agent_token=AGENT,
        heartbeat_seconds=0.5,
        node_timeout_seconds=5.0,
        tick_seconds=0.2,
        stop_grace_seconds=1.0,
        checkpoint_store_dir=str(tmp_path / "store"),
    )


# This release's protocol: a call without the header is answered as protocol 1,
# whose replies leave out `details_hidden` and `secret_env_keys`.
CURRENT = {PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
Headers = dict[str, str]


def _tokens(api: Api) -> tuple[Headers, Headers, Headers]:
    """Alice's, Bob's and the admin's headers, speaking this release's protocol."""
    return (
        {**api.user_token("alice"), **CURRENT},
        {**api.user_token("bob"), **CURRENT},
        {**api.admin, **CURRENT},
    )


def _tar(data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("checkpoint.pkl")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _alices_running_job(api: Api) -> tuple[Headers, Headers, int, Assignment, Response]:
    """Alice's job, running on n1, with a log line, progress and a checkpoint."""
    alice, bob, _ = _tokens(api)
    node = WireAgent(api, "n1", gpus=2)
    node.register()
    submitted = api.post("/api/v1/jobs", headers=alice, json=SPEC)
    assert submitted.status_code == 201, submitted.text
    job_id = int(submitted.json()["ids"][0])
    # Polled as an agent of this release (WireAgent speaks protocol 1, whose
    # agents get secret_env folded into env).
    r = api.get(
        "/api/v1/agent/work",
        headers={**api.node("n1"), **CURRENT},
        params={"node": "n1", "wait": 10},
    )
    assert r.status_code == 200, r.text
    start = WorkBatch.model_validate(r.json()).starts[0]
    node.start(job_id, start.attempt)
    node.log(job_id, start.attempt, "epoch 1 loss 0.5 (alice's output)")
    progress = ProgressBatch(
        attempt=start.attempt, node="n1", reports=[ProgressReport(at=1.0, epoch=1, loss=0.5)]
    )
    r = api.post(
        f"/api/v1/agent/jobs/{job_id}/progress",
        headers=api.node("n1"),
        json=progress.model_dump(mode="json"),
    )
    assert r.status_code == 200, r.text
    body = _tar(b"weights")
    r = api.client.put(
        f"/api/v1/agent/jobs/{job_id}/checkpoint",
        params={"attempt": start.attempt, "node": "n1"},
        headers={**api.node("n1"), "X-Checkpoint-Sha256": hashlib.sha256(body).hexdigest()},
        content=body,
    )
    assert r.status_code == 200, r.text
    return alice, bob, job_id, start, submitted


def test_another_user_sees_the_queue_but_not_the_details(api: Api) -> None:
    alice, bob, job_id, _, _ = _alices_running_job(api)
    admin = {**api.admin, **CURRENT}

    # Alice (the owner) and the admin see the details; the secret's key only.
    for who in (alice, admin):
        job = JobPublic.model_validate(api.get(f"/api/v1/jobs/{job_id}", headers=who).json())
        assert not job.details_hidden
        assert job.command == SPEC["command"] and job.env == SPEC["env"]
        assert job.workdir == SPEC["workdir"] and job.secret_env_keys == ["TOKEN"]
        assert job.progress is not None and job.checkpoint is not None
        assert api.get(f"/api/v1/jobs/{job_id}/logs", headers=who).status_code == 200
        assert api.get(f"/api/v1/jobs/{job_id}/progress", headers=who).status_code == 200

    # Bob sees what squeue shows: who, what size, where, since when.
    shown = api.get(f"/api/v1/jobs/{job_id}", headers=bob)
    assert shown.status_code == 200, shown.text
    job = JobPublic.model_validate(shown.json())
    assert job.details_hidden
    assert (job.id, job.name, job.user, job.state.value, job.gpus) == (
        job_id,
        "resnet",
        "alice",
        "running",
        1,
    )
    assert job.placement == {"n1": [0]} and job.started_at is not None
    for field in ("command", "env", "workdir", "message", "progress", "checkpoint"):
        assert getattr(job, field) is None, field
    assert job.secret_env_keys is None

    listed = api.get("/api/v1/jobs", headers=bob).json()["items"]
    (row,) = [j for j in listed if j["id"] == job_id]
    assert row["details_hidden"] and row["command"] is None and row["env"] is None
    assert row["workdir"] is None and row["user"] == "alice"

    # Routes that are all detail: 403, saying whose job it is.
    for path in ("logs", "logs?follow=true", "progress"):
        r = api.get(f"/api/v1/jobs/{job_id}/{path}", headers=bob)
        assert r.status_code == 403, (path, r.text)
        assert "belongs to alice" in r.json()["error"]
    # The checkpoint download is for agents, never for a user's token.
    r = api.client.get(f"/api/v1/agent/jobs/{job_id}/checkpoint", headers=bob)
    assert r.status_code == 403

    # Bob's own job is whole to him.
    mine = api.post("/api/v1/jobs", headers=bob, json={"command": "echo bob", "gpus": 1})
    own = api.get(f"/api/v1/jobs/{mine.json()['ids'][0]}", headers=bob).json()
    assert not own["details_hidden"] and own["command"] == "echo bob"


def test_the_history_hides_its_messages_from_another_user(api: Api) -> None:
    alice, bob, admin = _tokens(api)
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    job_id = api.post("/api/v1/jobs", headers=alice, json=SPEC).json()["ids"][0]
    start = node.work_until(lambda b: b.starts).starts[0]
    quoted = "workdir '/home/alice/project' does not exist on node 'n1'"
    node.event(job_id, start.attempt, "failed_to_start", message=quoted)
    for who in (alice, admin):
        history = api.get(f"/api/v1/jobs/{job_id}/history", headers=who).json()
        assert any(quoted in t["message"] for t in history["transitions"])
        assert quoted in api.get(f"/api/v1/jobs/{job_id}", headers=who).json()["message"]
    theirs = api.get(f"/api/v1/jobs/{job_id}/history", headers=bob).json()
    assert theirs["details_hidden"]
    assert [t["to_state"] for t in theirs["transitions"]] == [
        t["to_state"] for t in history["transitions"]
    ]
    assert all(t["message"] == "" for t in theirs["transitions"])
    assert api.get(f"/api/v1/jobs/{job_id}", headers=bob).json()["message"] is None


def test_a_secret_value_is_in_no_reply_but_reaches_the_agent(api: Api) -> None:
    alice, bob, job_id, start, submitted = _alices_running_job(api)
    admin = {**api.admin, **CURRENT}
    # The agent's assignment is the one place the value goes.
    assert start.secret_env == {"TOKEN": SECRET}
    assert SECRET not in repr(start)
    assert SECRET not in submitted.text and "TOKEN" in submitted.text

    replies = [submitted]
    for who in (alice, admin, bob):
        for path in (
            f"/api/v1/jobs/{job_id}",
            "/api/v1/jobs",
            f"/api/v1/jobs/{job_id}/history",
            f"/api/v1/jobs/{job_id}/logs",
            f"/api/v1/jobs/{job_id}/progress",
        ):
            replies.append(api.get(path, headers=who))
        # The same routes as a client of protocol 1 (no header) get.
        old = {k: v for k, v in who.items() if k != PROTOCOL_HEADER}
        replies.append(api.client.get(f"/api/v1/jobs/{job_id}", headers=old))
        replies.append(api.client.get("/api/v1/jobs", headers=old))
    node = WireAgent(api, "n1", gpus=2)
    node.exit(job_id, start.attempt, 0)
    replies.append(api.get(f"/api/v1/jobs/{job_id}/logs?follow=true", headers=alice))
    replies.append(api.post(f"/api/v1/jobs/{job_id}/cancel", headers=alice))
    assert replies[-2].status_code == 200 and "event: end" in replies[-2].text
    for reply in replies:
        assert SECRET not in reply.text, reply.url
    # Something was found where it should be (the search could find a value).
    assert any("wandb-key-1234" in r.text for r in replies)


def test_a_spec_giving_a_key_twice_or_a_bad_key_is_refused_without_echoing_values(api: Api) -> None:
    twice = {**SPEC, "env": {"TOKEN": "plain"}}
    r = api.post("/api/v1/jobs", json=twice)
    assert r.status_code == 422 and "TOKEN is in both env and secret_env" in r.text
    assert SECRET not in r.text
    bad = {"command": "true", "secret_env": {"A=B": SECRET}}
    r = api.post("/api/v1/jobs", json=bad)
    assert r.status_code == 422 and "is not a variable name" in r.text
    assert SECRET not in r.text
    long = {"command": "true", "secret_env": {"K": SECRET * 2000}}
    r = api.post("/api/v1/jobs", json=long)
    assert r.status_code == 422 and SECRET not in r.text
    assert json.loads(r.text)["error"]
