"""Issue 34, live: the information rule of the `goodput` policy
(`server/services/goodput_work.py`). The work a job has left reaches the
policy's view (`ClusterView.goodput`, built as the live scheduler builds
it) only when the job declared its total through its runtime's reports
(`GoodputReport.target`, or epochs or steps of a total), or as the median
total that the same user's ended jobs like it reached (learnt online); a
job that declared nothing, and that no ended job is like, gives the policy
no remaining work, whatever else the server knows of it (its submitted
duration estimate and time limit, how long it has run, its epochs and
steps so far)."""

from __future__ import annotations

from typing import Any

import pytest
from server_api import Api
from wire_agent import WireAgent

from schedulearn.core.goodput import GoodputReport, JobGoodput
from schedulearn.protocol import ProgressBatch, ProgressReport
from schedulearn.server.services import snapshot

LIMITS = {"init_batch": 32, "max_batch": 256, "min_local_batch": 1, "max_local_batch": 64}
ELASTIC = {"gpus": 1, "min_gpus": 1, "max_gpus": 4, "preemptible": True}


def _send(
    api: Api,
    job_id: int,
    at: float,
    progress: float,
    said: dict[str, Any] | None = None,
    **goodput: Any,
) -> None:
    """A progress report with a goodput record; `said`: the report's other fields."""
    report = ProgressReport(
        at=at,
        **{"epoch": 2, "step": 200, **(said or {})},
        goodput=GoodputReport(
            **{**LIMITS, "batch_size": 32, "local_batch": 32, "step_time": 0.1, **goodput},
            progress=progress,
        ),
    )
    body = ProgressBatch(attempt=1, node="n1", reports=[report])
    r = api.post(
        f"/api/v1/agent/jobs/{job_id}/progress",
        headers=api.node("n1"),
        json=body.model_dump(mode="json"),
    )
    assert r.status_code == 200, r.text


def _policy_view(api: Api) -> dict[int, JobGoodput]:
    """What the goodput policy reads, as the scheduler builds it."""
    view = api.state.db.call(lambda s: snapshot.build(s, 1e9, None, True).view)
    assert view.goodput is not None
    return dict(view.goodput)


def _submit(api: Api, name: str, **spec: Any) -> int:
    body = {"command": f"python train.py --name {name}", "name": name, **ELASTIC, **spec}
    r = api.post("/api/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    job_id: int = r.json()["ids"][0]
    return job_id


def test_the_policy_reads_declared_totals_and_nothing_else(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=4)
    node.register()
    declared = _submit(api, "declared")
    in_epochs = _submit(api, "in-epochs")
    in_steps = _submit(api, "in-steps")
    # Everything the server knows of this one except a declared total: a submitted
    # estimate, a time limit, epochs and steps done, run time, measured steps.
    silent = _submit(api, "silent", estimated_duration="2h", time_limit="4h")
    ids = {declared, in_epochs, in_steps, silent}
    node.work_until(lambda b: {s.job_id for s in b.starts} >= ids)
    _send(api, declared, 10.0, progress=100.0, target=400.0)
    # 2 of 8 epochs, 200 of 500 steps: a quarter and two fifths of the declared total.
    _send(api, in_epochs, 10.0, progress=100.0, said={"total_epochs": 8})
    _send(api, in_steps, 10.0, progress=100.0, said={"metrics": {"total_steps": 500}})
    _send(api, silent, 10.0, progress=100.0)

    view = _policy_view(api)
    assert view[declared].remaining == 300.0  # target - progress, as declared
    assert not any(job.estimated for job in view.values())  # nothing here is learnt
    assert view[in_epochs].remaining == pytest.approx(300.0)  # 6 more epochs at 50 a piece
    assert view[in_steps].remaining == pytest.approx(150.0)  # 300 more steps at 0.5 a piece
    assert view[silent].remaining is None  # no declared length: no remaining work


def test_a_total_is_learnt_from_ended_jobs_like_it(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=4)
    node.register()
    # Two earlier runs of "sweep" ended, at totals of 500 and 700 (median 600);
    # one of "other" at 5000; a cancelled run of "sweep" at 9000 teaches nothing.
    ended = {_submit(api, "sweep"): 500.0, _submit(api, "sweep"): 700.0}
    other = _submit(api, "other")
    cancelled = _submit(api, "sweep")
    first = [*ended, other, cancelled]
    batch = node.work_until(lambda b: {s.job_id for s in b.starts} >= set(first))
    attempts = {s.job_id: s.attempt for s in batch.starts}
    for job_id, total in [*ended.items(), (other, 5000.0), (cancelled, 9000.0)]:
        _send(api, job_id, 10.0, progress=total)
    assert api.post(f"/api/v1/jobs/{cancelled}/cancel").status_code == 200
    for job_id in (*ended, other):
        node.start(job_id, attempts[job_id])
        node.exit(job_id, attempts[job_id], 0)
    for job_id in (*ended, other):
        assert api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "succeeded"

    again = _submit(api, "sweep")
    bigger_batch = _submit(api, "sweep")
    unlike = _submit(api, "new")
    later = [again, bigger_batch, unlike]
    node.work_until(lambda b: {s.job_id for s in b.starts} >= set(later))
    _send(api, again, 20.0, progress=150.0)
    _send(api, bigger_batch, 20.0, progress=150.0, init_batch=64, batch_size=64, local_batch=64)
    _send(api, unlike, 20.0, progress=150.0)
    view = _policy_view(api)
    assert view[again].remaining == pytest.approx(600.0 - 150.0)  # learnt: the median
    assert view[again].estimated  # the policy weighs it as an estimate (`fairness_learned`)
    assert view[bigger_batch].remaining is None  # its steps count in other units
    assert view[unlike].remaining is None  # no ended job like it

    # Past the learnt total the estimate says nothing more: unknown again.
    _send(api, again, 30.0, progress=650.0)
    assert _policy_view(api)[again].remaining is None
