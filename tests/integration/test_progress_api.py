"""Progress reports: agents send them, the server keeps the latest per job
(shown in the job) and a short history; the agent's parser keeps the
named fields and any other numbers as metrics."""

from __future__ import annotations

import time

from server_api import Api
from wire_agent import WireAgent

from schedulearn.agent.progress import parse_line
from schedulearn.cli.jobs import progress_text
from schedulearn.protocol import ProgressBatch, ProgressReport
from schedulearn.server.services.progress import KEEP


def _send(api: Api, job_id: int, attempt: int, *reports: ProgressReport) -> None:
    body = ProgressBatch(attempt=attempt, node="n1", reports=list(reports))
    r = api.post(
        f"/api/v1/agent/jobs/{job_id}/progress",
        headers=api.node("n1"),
        json=body.model_dump(mode="json"),
    )
    assert r.status_code == 200, r.text


def test_latest_progress_and_history(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    job_id = api.post("/api/v1/jobs", json={"command": "train", "gpus": 1}).json()["ids"][0]
    assert api.get(f"/api/v1/jobs/{job_id}").json()["progress"] is None
    # A node reports progress only for an attempt placed on it: wait for the start.
    node.work_until(lambda batch: any(s.job_id == job_id for s in batch.starts))
    _send(
        api,
        job_id,
        1,
        ProgressReport(at=100.0, epoch=0, loss=2.0),
        ProgressReport(at=101.0, epoch=1, loss=1.5, accuracy=0.6, metrics={"lr": 0.1}),
    )
    shown = api.get(f"/api/v1/jobs/{job_id}").json()["progress"]
    assert shown["epoch"] == 1 and shown["loss"] == 1.5 and shown["accuracy"] == 0.6
    assert shown["metrics"] == {"lr": 0.1}
    # A late batch with older reports goes to the history, not over the latest.
    _send(api, job_id, 1, ProgressReport(at=50.0, epoch=0, loss=9.0))
    assert api.get(f"/api/v1/jobs/{job_id}").json()["progress"]["epoch"] == 1
    for start in range(0, KEEP + 50, 100):
        reports = [ProgressReport(at=200.0 + i, step=i) for i in range(start, start + 100)]
        _send(api, job_id, 1, *reports)
    history = api.get(f"/api/v1/jobs/{job_id}/progress").json()["reports"]
    assert len(history) == KEEP
    assert history[-1]["step"] == 299 and history[0]["step"] == 300 - KEEP
    assert api.get(f"/api/v1/jobs/{job_id}").json()["progress"]["step"] == 299
    assert api.get("/api/v1/jobs/999/progress").status_code == 404


def test_the_agent_parses_report_lines() -> None:
    line = '{"at":1.5,"step":3,"epoch":1,"loss":0.25,"accuracy":0.9,"lr":0.01,"note":"x"}'
    report = parse_line(line)
    assert report is not None
    assert (report.step, report.epoch, report.loss, report.accuracy) == (3, 1, 0.25, 0.9)
    assert report.metrics == {"lr": 0.01}
    assert parse_line("not json") is None
    assert parse_line("[1, 2]") is None
    assert parse_line('{"loss": 1.0}') is None  # no time: not a report


def test_show_prints_progress_in_one_line() -> None:
    text = progress_text(
        ProgressReport(
            at=time.time() - 5, epoch=3, total_epochs=10, step=120, loss=0.23456, accuracy=0.91
        )
    )
    assert text.startswith("epoch 3/10, step 120, loss 0.2346, accuracy 0.91 (")
    assert text.endswith("ago)")


def test_the_job_page_shows_named_figures_and_extra_metrics() -> None:
    from schedulearn.server.web.job_data import progress_of

    shown = progress_of(
        ProgressReport(at=1.0, epoch=2, total_epochs=4, loss=0.5, metrics={"lr": 0.01})
    )
    assert shown is not None and shown.fraction == 0.5
    assert shown.figures == {"epoch": "2", "loss": "0.5", "total_epochs": "4", "lr": "0.01"}


def test_the_job_page_shows_progress_and_moves(api: Api) -> None:
    import re

    from server_api import ADMIN

    node = WireAgent(api, "n1", gpus=2)
    node.register()
    r = api.post("/api/v1/jobs", json={"command": "train", "gpus": 1, "preemptible": True})
    job_id = r.json()["ids"][0]
    start = node.work_until(lambda b: b.starts).starts[0]
    node.start(job_id, start.attempt)
    _send(api, job_id, 1, ProgressReport(at=time.time(), epoch=4, loss=0.125, accuracy=0.75))
    assert api.post(f"/api/v1/jobs/{job_id}/move", json={"placement": {"n1": [1]}}).is_success
    client = api.client
    form = client.get("/ui/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None, form.text
    signed = client.post(
        "/ui/login", data={"token": ADMIN, "nonce": nonce.group(1)}, follow_redirects=False
    )
    assert signed.status_code in (302, 303), signed.text
    page = client.get(f"/ui/jobs/{job_id}")
    assert page.status_code == 200
    block = page.text[page.text.index('data-testid="progress"') :][:800]
    assert "epoch 4" in block and "loss 0.125" in block and "accuracy 0.75" in block
    node.exit(job_id, start.attempt, 0)
    moved = client.get(f"/ui/jobs/{job_id}")
    assert re.search(r'data-testid="moves">0 · 1 · 0<', moved.text), moved.text[:3000]
