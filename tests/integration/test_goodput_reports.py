"""Goodput reports, live: an agent sends the runtime's `goodput` record with a job's
progress; the server keeps the newest report and one measured step per
configuration over all attempts, and builds `ClusterView.goodput` from them
(only for a policy that uses it). The agent's parser keeps the record, and
drops it alone when it is not valid."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from server_api import Api
from sqlmodel import Session
from wire_agent import WireAgent

from schedulearn.agent.progress import parse_line
from schedulearn.core.goodput import GoodputReport, JobGoodput, StepSample
from schedulearn.protocol import (
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    ProgressBatch,
    ProgressReport,
)
from schedulearn.server.services import snapshot

LIMITS = {"init_batch": 32, "max_batch": 256, "min_local_batch": 1, "max_local_batch": 64}


def _report(at: float, **fields: Any) -> ProgressReport:
    goodput = GoodputReport(**{**LIMITS, "batch_size": 32, "local_batch": 32, **fields})
    return ProgressReport(at=at, epoch=1, goodput=goodput)


def _send(api: Api, job_id: int, attempt: int, *reports: ProgressReport) -> None:
    body = ProgressBatch(attempt=attempt, node="n1", reports=list(reports))
    r = api.post(
        f"/api/v1/agent/jobs/{job_id}/progress",
        headers=api.node("n1"),
        json=body.model_dump(mode="json"),
    )
    assert r.status_code == 200, r.text


def _view_goodput(api: Api, wanted: bool) -> dict[int, JobGoodput] | None:
    state = api.state
    view = state.db.call(lambda s: snapshot.build(s, 0.0, None, wanted).view)
    return None if view.goodput is None else dict(view.goodput)


def test_reports_become_the_cluster_views_goodput(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=4)
    node.register()
    spec = {"command": "train", "gpus": 1, "min_gpus": 1, "max_gpus": 4, "preemptible": True}
    job_id = api.post("/api/v1/jobs", json=spec).json()["ids"][0]
    silent = api.post("/api/v1/jobs", json=spec).json()["ids"][0]
    node.work_until(lambda batch: any(s.job_id == job_id for s in batch.starts))
    # Limits known, no step yet: the core model's prior (no samples).
    _send(api, job_id, 1, _report(10.0, progress=0.0, target=400.0))
    first = _view_goodput(api, True)
    assert first is not None and set(first) == {job_id}  # a job that never reported: left out
    assert first[job_id].samples == () and first[job_id].remaining == 400.0
    assert first[job_id].model().measured is False

    # Steps on 1 GPU (two accumulation steps) and then on 4; statistics arrive.
    _send(
        api,
        job_id,
        1,
        _report(11.0, step_time=0.3, sync_time=0.0, accum_steps=2, batch_size=96, progress=40.0),
        _report(
            12.0,
            step_time=0.12,
            sync_time=0.02,
            replicas=4,
            batch_size=128,
            grad_sqr=2.0,
            grad_var=1.0,
            progress=100.0,
            target=400.0,
        ),
    )
    goodput = _view_goodput(api, True)
    assert goodput is not None
    info = goodput[job_id]
    # One micro-step plus the sync, as the fit takes them.
    assert [(s.nodes, s.replicas, s.atomic_bsz) for s in info.samples] == [(1, 1, 32), (1, 4, 32)]
    assert [s.step_time for s in info.samples] == pytest.approx([0.1, 0.12])
    assert [s.sync_time for s in info.samples] == pytest.approx([0.0, 0.02])
    assert (info.grad_sqr, info.grad_var, info.remaining) == (2.0, 1.0, 300.0)
    assert info.limits.max_batch == 256 and info.model().measured
    # A policy that does not use goodput does not pay for it.
    assert _view_goodput(api, False) is None

    # A late report of an older time adds its step but does not replace the newest.
    _send(api, job_id, 1, _report(5.0, step_time=0.2, local_batch=16, progress=1.0))
    again = _view_goodput(api, True)
    assert again is not None
    assert again[job_id].remaining == 300.0
    assert StepSample(1, 1, 16, 0.2, 0.0) in again[job_id].samples
    # The API shows the record with the latest progress (to clients of this protocol).
    current = {**api.admin, PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
    shown = api.get(f"/api/v1/jobs/{job_id}", headers=current).json()["progress"]["goodput"]
    assert shown["replicas"] == 4 and shown["grad_var"] == 1.0
    # A job that has ended is no longer in the view.
    assert api.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
    assert silent not in (_view_goodput(api, True) or {})


def test_the_agent_keeps_the_goodput_record_and_drops_only_a_bad_one() -> None:
    good = dataclasses.asdict(GoodputReport(**LIMITS, batch_size=64, local_batch=32, replicas=2))
    report = parse_line(json.dumps({"at": 1.0, "epoch": 2, "goodput": good, "lr": 0.1}))
    assert report is not None and report.goodput is not None
    assert report.goodput.replicas == 2 and report.metrics == {"lr": 0.1}
    # A newer runtime's extra key is dropped, not fatal.
    newer = parse_line(json.dumps({"at": 1.0, "goodput": {**good, "newer_field": 1}}))
    assert newer is not None and newer.goodput == report.goodput
    bad = parse_line(json.dumps({"at": 1.0, "epoch": 2, "goodput": {**good, "init_batch": 0}}))
    assert bad is not None and bad.goodput is None and bad.epoch == 2


def test_impossible_reports_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="init_batch <= max_batch"):
        GoodputReport(init_batch=64, max_batch=32, min_local_batch=1, max_local_batch=8,
                      batch_size=32, local_batch=32)  # fmt: skip
    with pytest.raises(ValueError, match="nodes <= replicas"):
        GoodputReport(**LIMITS, batch_size=32, local_batch=32, nodes=2)
    with pytest.raises(ValueError, match="step_time must be a finite number"):
        GoodputReport(**LIMITS, batch_size=32, local_batch=32, step_time=-1.0)


def test_the_job_page_shows_what_an_adaptive_job_runs_with() -> None:
    from schedulearn.server.web.job_data import progress_of

    report = _report(1.0, batch_size=128, local_batch=32, replicas=4, lr_scale=2.5,
                     progress=90.0, target=360.0)  # fmt: skip
    shown = progress_of(report)
    assert shown is not None and shown.fraction == 0.25  # progress towards its target
    assert shown.figures["batch_size"] == "128" and shown.figures["lr_scale"] == "2.5"
    assert "goodput" not in shown.figures


def test_the_queue_shown_under_goodput_is_ordered_by_the_reports(api: Api) -> None:
    from schedulearn.server.models import GoodputState
    from schedulearn.server.services import queue

    assert api.put("/api/v1/policy", json={"spec": "goodput"}).status_code == 200
    WireAgent(api, "n1", gpus=1).register()
    blocker = api.post("/api/v1/jobs", json={"command": "hold", "gpus": 1}).json()["ids"][0]
    api.settle()
    assert api.get(f"/api/v1/jobs/{blocker}").json()["state"] == "assigned"
    spec = {"command": "train", "gpus": 1, "min_gpus": 1, "max_gpus": 4, "preemptible": True}
    first = api.post("/api/v1/jobs", json=spec).json()["ids"][0]
    second = api.post("/api/v1/jobs", json=spec).json()["ids"][0]
    state = api.state

    def order() -> list[int]:
        read = state.db.call(lambda s: queue.read(s, "fifo", 100.0))
        return [j.id for j in read.order.jobs]

    # The only GPU is held, so both wait; nothing reported: alike, in arrival order.
    assert order() == [first, second]

    def reported(session: Session) -> None:
        # The first has run before: measured, with a long way to go. A job never
        # measured is the more urgent (least attained service first).
        report = _report(1.0, step_time=0.5, progress=10.0, target=1e6).goodput
        assert report is not None
        sample = report.sample()
        assert sample is not None
        session.add(
            GoodputState(
                job_id=first,
                at=1.0,
                report=dataclasses.asdict(report),
                samples=[[1, 1, 32, sample.step_time, sample.sync_time]],
            )
        )
        session.commit()

    state.db.call(reported)
    assert order() == [second, first]


def test_a_jobs_goodput_rows_go_once_it_has_ended(api: Api) -> None:
    from sqlmodel import select

    from schedulearn.server.models import GoodputState

    node = WireAgent(api, "n1", gpus=4)
    node.register()
    spec = {"command": "train", "gpus": 1, "min_gpus": 1, "max_gpus": 4, "preemptible": True}
    ended = api.post("/api/v1/jobs", json=spec).json()["ids"][0]
    running = api.post("/api/v1/jobs", json=spec).json()["ids"][0]
    node.work_until(lambda b: {s.job_id for s in b.starts} >= {ended, running})
    for job_id in (ended, running):
        _send(api, job_id, 1, _report(10.0, step_time=0.3, progress=5.0, target=400.0))
    state = api.state
    scheduler = state.scheduler

    def rows() -> list[int]:
        return state.db.call(lambda s: sorted(s.exec(select(GoodputState.job_id)).all()))

    def pruning_round() -> None:
        # The scheduler prunes every PRUNE_SECONDS; make the next round one that does.
        scheduler._pruned_at = 0.0
        api.settle()

    assert rows() == sorted([ended, running])
    pruning_round()
    assert rows() == sorted([ended, running])  # both still run: both kept

    assert api.post(f"/api/v1/jobs/{ended}/cancel").status_code == 200
    pruning_round()
    assert rows() == [running]
    # A report that arrives late makes its row again, and the next prune takes it.
    _send(api, ended, 1, _report(11.0, step_time=0.3, progress=6.0, target=400.0))
    assert rows() == sorted([ended, running])
    pruning_round()
    assert rows() == [running]
