"""Throughput profiles live: measured from the samples/s that running jobs report,
imported by an admin (Gavel's format, read by the CLI), listed by anyone."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from server_api import Api
from wire_agent import WireAgent

from schedulearn.core.throughput import ProfileTable
from schedulearn.protocol import ProfileList, ProgressBatch, ProgressReport
from schedulearn.server.services import profiles


def listed(api: Api, headers: dict[str, str] | None = None) -> ProfileList:
    r = api.get("/api/v1/profiles", headers=headers)
    assert r.status_code == 200, r.text
    return ProfileList.model_validate(r.json())


def report(api: Api, job_id: int, attempt: int, samples: float, expect: int = 200) -> None:
    body = ProgressBatch(
        attempt=attempt,
        node="n1",
        reports=[ProgressReport(at=time.time(), samples_per_sec=samples)],
    )
    r = api.post(
        f"/api/v1/agent/jobs/{job_id}/progress",
        headers=api.node("n1"),
        json=body.model_dump(mode="json"),
    )
    assert r.status_code == expect, r.text


def running_job(api: Api, node: WireAgent, **spec: object) -> tuple[int, int]:
    r = api.post("/api/v1/jobs", json={"command": ["python", "train.py"], **spec})
    assert r.status_code == 201, r.text
    job_id = r.json()["ids"][0]
    (start,) = node.work_until(lambda b: b.starts).starts
    node.start(job_id, start.attempt)
    return job_id, start.attempt


def test_reported_samples_per_second_become_a_profile(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=2, gpu_type="v100")
    node.register()
    job_id, attempt = running_job(api, node, gpus=2, model="ResNet-50 (batch size 64)")
    report(api, job_id, attempt, 640.0)
    (p,) = listed(api).items
    assert (p.model, p.batch_size, p.gpu_type, p.gpu_count, p.spread) == (
        "ResNet-50",
        64,
        "v100",
        2,
        False,
    )
    assert (p.samples_per_sec, p.steps_per_sec, p.source, p.reports) == (
        640.0,
        10.0,
        f"job {job_id}",
        1,
    )
    report(api, job_id, attempt, 740.0)  # smoothed: 640 + 0.3 x 100
    (p,) = listed(api).items
    assert p.samples_per_sec == pytest.approx(670.0)
    assert p.reports == 2
    # The live table is what the estimator reads.
    with api.state.db.session() as session:
        table = profiles.load_table(session)
    assert table.lookup("ResNet-50", "v100", gpu_count=2, batch_size=64) == pytest.approx(670 / 64)


def test_reports_that_cannot_be_attributed_make_no_profile(api: Api) -> None:
    typed = WireAgent(api, "n1", gpus=1, gpu_type="v100")
    typed.register()
    no_model, attempt = running_job(api, typed)
    report(api, no_model, attempt, 100.0)
    # An attempt not placed on this node: refused (a node reports only on its own).
    report(api, no_model, attempt + 1, 100.0, expect=403)
    assert listed(api).items == []


def test_admin_imports_gavel_profiles_and_users_may_only_read(api: Api, traces: Path) -> None:
    path = traces / "gavel" / "simulation_throughputs.json"
    table = ProfileTable.from_gavel(json.loads(path.read_text()))
    body = {
        "source": "gavel",
        "profiles": [
            {
                "model": p.model,
                "batch_size": p.batch_size,
                "gpu_type": p.gpu_type,
                "gpu_count": p.gpu_count,
                "spread": p.spread,
                "steps_per_sec": p.steps_per_second,
            }
            for p in table.profiles()
        ],
    }
    user = api.user_token("bob")
    assert api.post("/api/v1/profiles", headers=user, json=body).status_code == 403
    r = api.post("/api/v1/profiles", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["stored"] == len(table) > 100
    items = listed(api, headers=user).items
    assert len(items) == len(table)
    stored = {(p.model, p.batch_size, p.gpu_type, p.gpu_count, p.spread): p for p in items}
    resnet = stored[("ResNet-50", 64, "v100", 1, False)]
    assert resnet.source == "gavel" and resnet.samples_per_sec is None
    assert resnet.steps_per_sec == pytest.approx(table.lookup("ResNet-50", "v100", batch_size=64))
    # Importing again replaces, never duplicates.
    assert api.post("/api/v1/profiles", json=body).status_code == 200
    assert len(listed(api).items) == len(table)


def test_a_bad_profile_is_refused_with_what_to_change(api: Api) -> None:
    r = api.post(
        "/api/v1/profiles",
        json={"profiles": [{"model": "x", "gpu_type": "v100", "steps_per_sec": 0}]},
    )
    assert r.status_code == 422
    assert "steps_per_sec" in r.text
    # A GPU type of only blank or control characters: the whole batch is refused.
    good = {"model": "y", "gpu_type": "v100", "steps_per_sec": 1.0}
    blank = {"model": "x", "gpu_type": "\u001d ", "steps_per_sec": 1.0}
    r = api.post("/api/v1/profiles", json={"profiles": [good, blank]})
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("profiles[1]: profile of 'x' names no GPU type")
    assert listed(api).items == []


def test_the_live_similarity_policy_places_by_the_stored_profiles(api: Api) -> None:
    # MyNet is known only from the profiles stored here: 10x faster on the
    # v100. Without them similarity sees an unknown model (the same speed
    # everywhere) and its tie-break picks the k80 node; with them, the v100.
    fast = WireAgent(api, "a-v100", gpus=1, gpu_type="v100")
    slow = WireAgent(api, "b-k80", gpus=1, gpu_type="k80")
    fast.register()
    slow.register()
    body = {
        "source": "bench",
        "profiles": [
            {"model": "MyNet", "gpu_type": "k80", "steps_per_sec": 1.0},
            {"model": "MyNet", "gpu_type": "v100", "steps_per_sec": 10.0},
        ],
    }
    assert api.post("/api/v1/profiles", json=body).status_code == 200
    assert api.put("/api/v1/policy", json={"spec": "similarity"}).status_code == 200
    r = api.post("/api/v1/jobs", json={"command": ["true"], "model": "MyNet"})
    job_id = r.json()["ids"][0]
    (start,) = fast.work_until(lambda b: b.starts).starts
    assert start.job_id == job_id
    placed = api.get(f"/api/v1/jobs/{job_id}").json()["placement"]
    assert placed == {"a-v100": [0]}
