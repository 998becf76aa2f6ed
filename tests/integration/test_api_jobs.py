"""The user API against an app built by `create_app` (its own database per test)."""

from __future__ import annotations

from collections.abc import Iterator

from server_api import Api
from wire_agent import WireAgent

from schedulearn.protocol import (
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    JobList,
    JobPublic,
    SubmitReply,
)
from schedulearn.settings import ServerSettings


def submit(api: Api, body: dict[str, object], headers: dict[str, str] | None = None) -> SubmitReply:
    r = api.post("/api/v1/jobs", headers=headers, json=body)
    assert r.status_code == 201, r.text
    return SubmitReply.model_validate(r.json())


def test_submit_json_and_yaml_are_committed_and_listed(api: Api) -> None:
    a = submit(api, {"name": "a", "command": ["python", "train.py"], "gpus": 2, "memory": "16G"})
    r = api.post(
        "/api/v1/jobs",
        content=b"name: b\ncommand: python train.py --lr 0.1\ngpus: 1\nestimated_duration: 2h\n",
        headers={**api.admin, "content-type": "application/yaml"},
    )
    assert r.status_code == 201, r.text
    b = SubmitReply.model_validate(r.json())
    job_a = JobPublic.model_validate(api.get(f"/api/v1/jobs/{a.ids[0]}").json())
    job_b = JobPublic.model_validate(api.get(f"/api/v1/jobs/{b.ids[0]}").json())
    assert (job_a.name, job_a.gpus, job_a.memory_gb, job_a.state) == ("a", 2, 16.0, "pending")
    assert job_b.command == "python train.py --lr 0.1"
    assert job_b.estimated_duration == 7200.0
    listing = JobList.model_validate(api.get("/api/v1/jobs").json())
    assert [j.id for j in listing.items] == [b.ids[0], a.ids[0]]  # newest first


def test_job_array_gets_count_jobs_with_array_ids(api: Api) -> None:
    reply = submit(api, {"command": "echo $SCHEDULEARN_JOB_ID", "count": 5})
    assert len(reply.ids) == 5
    assert {j.array_id for j in reply.jobs} == {reply.ids[0]}
    assert [j.array_index for j in reply.jobs] == [0, 1, 2, 3, 4]


def test_submit_reply_shows_each_job_as_stored(api: Api) -> None:
    # The reply is built from the rows as inserted, not read back: it must
    # say what a later read of the stored job says (but the queue position
    # and predictions, which only a read computes).
    body = {
        "name": "r",
        "command": ["python", "train.py"],
        "gpus": 2,
        "memory": "8G",
        "env": {"A": "1"},
        "secret_env": {"TOKEN": "s"},
        "priority": 3,
        "count": 2,
    }
    # This release's protocol: an older one's replies leave out newer fields.
    current = {**api.admin, PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
    reply = submit(api, body, headers=current)
    computed = {
        "queue_position",
        "waiting_reason",
        "duration_estimate",
        "duration_source",
        "predicted_start_at",
        "predicted_end_at",
    }
    for job in reply.jobs:
        read = api.get(f"/api/v1/jobs/{job.id}", headers=current)
        stored = JobPublic.model_validate(read.json())
        assert job.model_dump(exclude=computed) == stored.model_dump(exclude=computed)
    assert reply.jobs[1].secret_env_keys == ["TOKEN"]
    assert reply.jobs[1].env == {"A": "1"}


def test_list_filters_and_pagination(api: Api) -> None:
    alice = api.user_token("alice")
    for i in range(7):
        submit(api, {"name": f"j{i}", "command": "true"}, headers=alice if i % 2 else None)
    page = JobList.model_validate(
        api.get("/api/v1/jobs", params={"limit": 3, "order": "asc"}).json()
    )
    assert page.total == 7 and [j.name for j in page.items] == ["j0", "j1", "j2"]
    page2 = JobList.model_validate(
        api.get("/api/v1/jobs", params={"limit": 3, "offset": 3, "order": "asc"}).json()
    )
    assert [j.name for j in page2.items] == ["j3", "j4", "j5"]
    mine = JobList.model_validate(api.get("/api/v1/jobs", params={"user": "alice"}).json())
    assert mine.total == 3 and {j.user for j in mine.items} == {"alice"}
    pending = JobList.model_validate(api.get("/api/v1/jobs", params={"state": "pending"}).json())
    assert pending.total == 7
    none = JobList.model_validate(api.get("/api/v1/jobs", params={"state": "running"}).json())
    assert none.total == 0


def test_unservable_job_is_refused_with_what_to_change(api: Api) -> None:
    WireAgent(api, "n1", gpus=8).register()
    WireAgent(api, "n2", gpus=4).register()
    r = api.post("/api/v1/jobs", json={"command": "x", "gpus": 16})
    assert r.status_code == 422
    assert "no node has 16 GPUs; the largest has 8" in r.json()["error"]
    assert "ask for at most 12" in r.json()["error"]
    r = api.post("/api/v1/jobs", json={"command": "x", "gpus": 1, "gpu_type": "a100"})
    assert r.status_code == 422 and "no node has a100 GPUs" in r.json()["error"]
    r = api.post("/api/v1/jobs", json={"command": "x", "gpus": 2, "cpus": 64})
    assert r.status_code == 422 and "CPUs" in r.json()["error"]
    r = api.post("/api/v1/jobs", json={"command": "x", "image": "busybox"})
    assert r.status_code == 422 and "container" in r.json()["error"]
    # A gang over both nodes is fine.
    assert api.post("/api/v1/jobs", json={"command": "x", "gpus": 12}).status_code == 201


def test_show_gives_queue_position_and_reason(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=4)
    node.register()
    first = submit(api, {"command": "a", "gpus": 3}).ids[0]
    node.work_until(lambda b: b.starts)  # placed: 1 GPU left
    second = submit(api, {"command": "b", "gpus": 2}).ids[0]
    third = submit(api, {"command": "c", "gpus": 4}).ids[0]
    api.settle()  # the scheduler has seen them, and left them waiting
    s2 = JobPublic.model_validate(api.get(f"/api/v1/jobs/{second}").json())
    s3 = JobPublic.model_validate(api.get(f"/api/v1/jobs/{third}").json())
    assert s2.state == "pending" and s2.queue_position == 1
    assert s2.waiting_reason == "needs 2 GPUs on one node; the most free on any node is 1"
    assert s3.queue_position == 2
    assert (
        s3.waiting_reason == "needs 4 GPUs on one node; the most free on any node is 1; 1 job ahead"
    )
    running = JobPublic.model_validate(api.get(f"/api/v1/jobs/{first}").json())
    assert running.queue_position is None and running.placement == {"n1": [0, 1, 2]}


def test_errors_are_json(api: Api) -> None:
    r = api.get("/api/v1/jobs/999")
    assert r.status_code == 404 and "no job 999" in r.json()["error"]
    r = api.client.get("/api/v1/jobs")
    assert r.status_code == 401 and "token" in r.json()["error"]
    r = api.get("/api/v1/jobs", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and "unknown token" in r.json()["error"]
    r = api.post("/api/v1/jobs", json={"command": "x", "gpus": -1})
    assert r.status_code == 422 and r.json()["error"].startswith("gpus:")
    r = api.post("/api/v1/jobs", json={"command": "x", "min_gpus": 4, "max_gpus": 2})
    assert r.status_code == 422 and "min_gpus (4) is above max_gpus (2)" in r.json()["error"]
    r = api.post(
        "/api/v1/jobs",
        content=b"{not json",
        headers={**api.admin, "content-type": "application/json"},
    )
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
    r = api.post("/api/v1/jobs", json={"command": "x", "nope": 1})
    assert r.status_code == 422 and "nope" in r.json()["error"]
    # A misspelt field in a YAML job file names the closest and the valid ones.
    r = api.post(
        "/api/v1/jobs",
        content=b"command: x\ngpu: 2\n",
        headers={**api.admin, "content-type": "application/yaml"},
    )
    assert r.status_code == 422
    assert r.json()["error"].startswith("gpu: unknown field 'gpu' (did you mean 'gpus'?)")
    assert "valid fields: array_limit, array_start, command," in r.json()["error"]


def test_oversized_body_gets_413(api: Api, settings: ServerSettings) -> None:
    big = {
        "command": "x",
        "env": {f"K{i}": "v" * 9000 for i in range(settings.max_body_bytes // 9000 + 2)},
    }
    r = api.post("/api/v1/jobs", json=big)
    assert r.status_code == 413 and "limit" in r.json()["error"]

    # Without a Content-Length (chunked), the limit holds too.
    def chunks() -> Iterator[bytes]:
        for _ in range(settings.max_body_bytes // 65536 + 2):
            yield b" " * 65536

    r = api.post(
        "/api/v1/jobs", content=chunks(), headers={**api.admin, "content-type": "application/json"}
    )
    assert r.status_code == 413


def test_a_user_may_cancel_only_their_own_jobs(api: Api) -> None:
    alice, bob = api.user_token("alice"), api.user_token("bob")
    job = submit(api, {"command": "x"}, headers=alice).ids[0]
    r = api.post(f"/api/v1/jobs/{job}/cancel", headers=bob)
    assert r.status_code == 403 and "belongs to alice" in r.json()["error"]
    r = api.post(f"/api/v1/jobs/{job}/cancel", headers=alice)
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    other = submit(api, {"command": "y"}, headers=bob).ids[0]
    assert api.post(f"/api/v1/jobs/{other}/cancel").json()["state"] == "cancelled"  # admin may


def test_tokens_roles(api: Api) -> None:
    alice = api.user_token("alice")
    assert api.get("/api/v1/whoami", headers=alice).json() == {"user": "alice", "role": "user"}
    r = api.put("/api/v1/policy", headers=alice, json={"spec": "fifo"})
    assert r.status_code == 403
    r = api.post("/api/v1/tokens", headers=alice, json={"user": "mallory", "role": "admin"})
    assert r.status_code == 403
    r = api.get("/api/v1/jobs", headers=api.agent)
    assert r.status_code == 403 and "agent" in r.json()["error"]
    r = api.post("/api/v1/agent/register", headers=alice, json={"name": "x"})
    assert r.status_code == 403


def test_policy_is_validated_stored_and_listed(api: Api) -> None:
    assert api.get("/api/v1/policy").json()["spec"] == "fifo"
    r = api.put("/api/v1/policy", json={"spec": "nonesuch"})
    assert (
        r.status_code == 400
        and "choose one of" in r.json()["error"]
        and "fifo" in r.json()["error"]
    )
    r = api.put("/api/v1/policy", json={"spec": "fifo:nonsense=1"})
    assert r.status_code == 400 and "has no option nonsense" in r.json()["error"]
    r = api.put("/api/v1/policy", json={"spec": "fifo:backfill=true"})
    assert r.status_code == 200 and r.json()["name"] == "fifo"
    assert api.get("/api/v1/policy").json()["spec"] == "fifo:backfill=true"


def test_health_and_metrics(api: Api) -> None:
    health = api.client.get("/healthz").json()
    assert health["status"] == "ok" and health["database"] in ("sqlite", "postgresql")
    submit(api, {"command": "x", "count": 3})
    text = api.client.get("/metrics").text
    assert "schedulearn_jobs_submitted_total 3.0" in text
    assert 'schedulearn_jobs{state="pending"} 3.0' in text


def test_a_bad_env_key_is_refused_at_submit_naming_the_key(api: Api) -> None:
    # Refused by the spec's own validation (protocol.JobSpec), so the CLI, the
    # API and the web form all get it at submit, not when the job starts.
    for field in ("env", "secret_env"):
        for key, said in (
            ("A=B", "a name cannot hold '='"),
            ("", "remove the empty key"),
            ("1X", "a name cannot start with a digit"),
            ("A-B", "letters, digits and '_' only"),
            ("A\x00B", "may not contain NUL"),
        ):
            r = api.post("/api/v1/jobs", json={"command": "true", field: {key: "value-42"}})
            assert r.status_code == 422, (field, key, r.text)
            assert repr(key) in r.json()["error"] and said in r.json()["error"], r.text
            assert "value-42" not in r.text
    r = api.post("/api/v1/jobs", json={"command": "true", "env": {"OK": "a\x00b"}})
    assert r.status_code == 422 and "env['OK'] may not contain NUL" in r.json()["error"]
    assert api.post("/api/v1/jobs", json={"command": "true", "env": {"_OK_1": "x"}}).is_success
