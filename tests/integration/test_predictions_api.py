"""Predicted start and end times on the job API, and `GET /api/v1/policy/preview`,
against a real app and database; the node is a `WireAgent` (no real jobs run)."""

from __future__ import annotations

import math
import time
from functools import partial

import pytest
from server_api import ADMIN, Api
from stepped import Stepped, stepped_app
from wire_agent import WireAgent

from schedulearn.protocol import JobList, JobPublic, PolicyPreview
from schedulearn.settings import ServerSettings
from waiting import wait_until


@pytest.fixture(autouse=True)
def fresh_forecasts(request: pytest.FixtureRequest) -> None:
    """Every state change redoes the forecast in these tests.

    Otherwise a forecast that took over `SLOW_SECONDS` (50 ms: a loaded CI
    host on PostgreSQL) is served stale for a while by design, and a job
    submitted just after it has no prediction yet. The test of that design
    sets `slow_seconds` back to 0 itself. (Tests on `stepped_app` run on a
    manual clock and need nothing.)"""
    if "api" in request.fixturenames:
        api: Api = request.getfixturevalue("api")
        api.state.predictions.slow_seconds = math.inf


def submit(api: Api, **body: object) -> int:
    r = api.post("/api/v1/jobs", json={"command": ["sleep", "1"], **body})
    assert r.status_code == 201, r.text
    return int(r.json()["ids"][0])


def job(api: Api, job_id: int) -> JobPublic:
    r = api.get(f"/api/v1/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return JobPublic.model_validate(r.json())


def job_state(api: Api, job_id: int) -> str:
    return str(job(api, job_id).state)


def busy_gpu(api: Api, seconds: float = 100) -> tuple[int, float]:
    """Node n1 with one GPU, held by a non-preemptible job reported started."""
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    blocker = submit(api, name="blocker", estimated_duration=seconds)
    (start,) = node.work_until(lambda b: b.starts).starts
    node.start(blocker, start.attempt)
    began = time.time()
    wait_until(lambda: job(api, blocker).state, 10, "the blocker to run", until="running".__eq__)
    return blocker, began


def started_on_stepped(app: Stepped, **body: object) -> tuple[WireAgent, int, int]:
    """Node n1 with one GPU on `app`, running a job submitted with `body`:
    (the node, the job's id, its attempt)."""
    node = WireAgent(app.api, "n1", gpus=1)
    node.register()
    job_id = app.submit(**body)
    app.schedule()
    (start,) = node.work(wait=0).starts
    node.start(job_id, start.attempt)
    return node, job_id, start.attempt


def preview(api: Api, headers: dict[str, str] | None = None, **params: str) -> PolicyPreview:
    r = api.get("/api/v1/policy/preview", headers=headers, params=params)
    assert r.status_code == 200, r.text
    return PolicyPreview.model_validate(r.json())


def test_pending_jobs_get_start_and_end_from_the_policy_in_force(api: Api) -> None:
    blocker, began = busy_gpu(api)
    first = submit(api, name="a", estimated_duration=50)
    second = submit(api, name="b", estimated_duration="2m")

    b = job(api, blocker)
    assert b.duration_estimate == 100 and b.duration_source == "estimate"
    assert b.predicted_start_at is None  # it has started: see started_at
    assert b.predicted_end_at == pytest.approx(began + 100, abs=2)
    a = job(api, first)
    assert a.predicted_start_at == pytest.approx(began + 100, abs=2)
    assert a.predicted_end_at == pytest.approx(began + 150, abs=2)
    c = job(api, second)
    assert c.predicted_start_at == pytest.approx(began + 150, abs=2)
    assert c.predicted_end_at == pytest.approx(began + 270, abs=2)

    # The listing carries the same figures.
    listing = JobList.model_validate(api.get("/api/v1/jobs").json())
    by_id = {j.id: j for j in listing.items}
    assert by_id[second].predicted_end_at == pytest.approx(c.predicted_end_at, abs=0.5)


def test_a_job_of_unknown_duration_is_said_to_be_unknown(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    mystery = submit(api, name="mystery", command=["python", "never-seen.py"])
    (start,) = node.work_until(lambda b: b.starts).starts
    node.start(mystery, start.attempt)
    behind = submit(api, name="behind", estimated_duration=10)
    m = job(api, mystery)
    assert (m.duration_estimate, m.duration_source, m.predicted_end_at) == (None, None, None)
    waiting = job(api, behind)
    assert waiting.duration_estimate == 10
    assert waiting.predicted_start_at is None and waiting.predicted_end_at is None


def test_history_of_the_same_name_gives_an_estimate(settings: ServerSettings) -> None:
    # On a manual clock: the run lasts exactly 0.3 s, whatever the machine's speed.
    with stepped_app(settings) as app:
        node, done, attempt = started_on_stepped(
            app, name="nightly", command=["python", "train.py"]
        )
        app.advance(0.3)
        node.exit(done, attempt, 0)
        assert app.job(done).state == "succeeded"
        again = app.submit(name="nightly", command=["python", "train.py", "--other"])
        j = app.job(again)
        assert j.duration_source == "history"
        assert j.duration_estimate == pytest.approx(0.3)
        # Finished jobs carry no predictions.
        assert app.job(done).duration_estimate is None


def test_preview_shows_srtf_below_fifo_for_short_jobs_behind_a_long_one(api: Api) -> None:
    busy_gpu(api)
    for seconds in (1000, 10, 10):
        submit(api, estimated_duration=seconds, preemptible=True)

    result = preview(api, policies="fifo,srtf")
    assert [p.spec for p in result.policies] == ["fifo", "srtf"]
    assert (result.in_force, result.pending, result.running, result.without_estimate) == (
        "fifo",
        3,
        1,
        0,
    )
    fifo, srtf = result.policies
    assert fifo.in_force and not srtf.in_force
    assert (fifo.predicted, srtf.predicted) == (4, 4)
    # Both drain the same work on one GPU: ~100 s left + 1020 s.
    assert fifo.makespan == pytest.approx(1120, abs=3)
    assert srtf.makespan == pytest.approx(1120, abs=3)
    assert srtf.mean_jct is not None and fifo.mean_jct is not None
    assert srtf.mean_jct < fifo.mean_jct - 400
    assert fifo.utilisation == pytest.approx(1.0, abs=0.01)

    # The default preview lists every registered policy, the one in force marked.
    everything = preview(api)
    specs = [p.spec for p in everything.policies]
    assert {"fifo", "srtf", "tiresias", "edf"} <= set(specs)
    assert [p.spec for p in everything.policies if p.in_force] == ["fifo"]
    assert all(p.error is None for p in everything.policies), everything.policies


def test_preview_follows_the_queue(api: Api) -> None:
    busy_gpu(api)
    before = preview(api, policies="fifo").policies[0]
    submit(api, estimated_duration=500)
    after = preview(api, policies="fifo").policies[0]
    assert before.makespan is not None
    assert after.makespan == pytest.approx(before.makespan + 500, abs=3)


def test_preview_is_open_to_users_and_refuses_unknown_policies(api: Api) -> None:
    WireAgent(api, "n1", gpus=1).register()
    user = api.user_token("alice")
    assert preview(api, headers=user, policies="fifo").policies[0].spec == "fifo"
    r = api.get("/api/v1/policy/preview", headers=user, params={"policies": "fifo,nope"})
    assert r.status_code == 400
    assert "nope" in r.text and "srtf" in r.text  # names the valid policies


def test_forecasts_are_reused_until_the_state_changes(settings: ServerSettings) -> None:
    # On a manual clock with the scheduler's loop stopped: only the test changes
    # the state or ages the forecast (on real time a loaded host could outlive
    # the ttl between two listings).
    with stepped_app(settings) as app:
        predictor = app.api.state.predictions
        # Any change redoes the forecast at once, however long it took.
        predictor.slow_seconds = predictor.background_seconds = math.inf
        started_on_stepped(app, name="blocker", estimated_duration=100)
        app.submit(estimated_duration=5)
        app.api.get("/api/v1/jobs")
        runs = predictor.computed
        assert runs >= 1
        for _ in range(5):
            app.api.get("/api/v1/jobs")
        assert predictor.computed == runs
        app.submit(estimated_duration=5)
        app.api.get("/api/v1/jobs")
        assert predictor.computed == runs + 1


def test_preview_reads_the_queue_as_it_is_even_after_a_slow_forecast(api: Api) -> None:
    busy_gpu(api)
    submit(api, estimated_duration=5)
    predictor = api.state.predictions
    predictor.slow_seconds = 0.0  # every forecast is slow: listings may serve it a while
    api.get("/api/v1/jobs")
    submit(api, estimated_duration=7)
    result = preview(api, policies="fifo")
    assert (result.pending, result.running, result.policies[0].predicted) == (2, 1, 3)


def test_preview_compares_policies_over_the_jobs_all_of_them_predict(api: Api) -> None:
    busy_gpu(api)
    submit(api, name="mystery", command=["python", "explore.py"])  # no estimate, no history
    short = submit(api, estimated_duration=10)
    result = preview(api, policies="fifo,srtf")
    fifo, srtf = result.policies
    # fifo starts the mystery job next and the short job waits on it forever;
    # srtf runs the short job first. Only the blocker ends under both.
    assert (fifo.predicted, srtf.predicted) == (1, 2)
    assert result.compared == 1 and result.without_estimate == 1
    assert fifo.mean_jct == pytest.approx(srtf.mean_jct, abs=0.5)
    assert job(api, short).predicted_start_at is None  # under fifo, in force


def sign_in(api: Api) -> None:
    import re

    form = api.client.get("/ui/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce, form.text
    r = api.client.post(
        "/ui/login", data={"token": ADMIN, "nonce": nonce.group(1), "next": "/ui/jobs"}
    )
    assert r.status_code in (200, 303), r.text


def test_the_web_pages_show_the_predictions(api: Api) -> None:
    import re

    busy_gpu(api)
    waiting = submit(api, name="waits", estimated_duration=50)
    mystery = submit(api, name="mystery", command=["python", "explore.py"])
    sign_in(api)
    predicted = job(api, waiting).predicted_start_at
    assert predicted is not None
    clock = time.strftime("%H:%M:%S", time.localtime(predicted))

    page = api.client.get(f"/ui/jobs/{waiting}").text
    start = re.search(r'data-testid="predicted-start">(.*?)</dd>', page, re.S)
    assert start and clock in start.group(1)
    assert re.search(r"duration-estimate\">50 s .*your estimate", page)
    unknown = api.client.get(f"/ui/jobs/{mystery}").text
    assert re.search(r'data-testid="duration-estimate">.*?unknown', unknown, re.S)

    listing = api.client.get("/ui/jobs").text
    row = re.search(rf'data-job="{waiting}".*?</tr>', listing, re.S)
    assert row and f"~{clock}" in row.group(0)
    queue = api.client.get("/ui/queue").text
    row = re.search(rf'data-job="{waiting}".*?</tr>', queue, re.S)
    assert row and f"~{clock}" in row.group(0)


def test_reported_progress_extrapolates_a_running_jobs_end(
    settings: ServerSettings,
) -> None:
    from schedulearn.protocol import ProgressBatch, ProgressReport

    with stepped_app(settings) as app:
        _, job_id, attempt = started_on_stepped(app, name="epochs", estimated_duration=10_000)
        started = app.clock.now()
        app.advance(1.0)
        body = ProgressBatch(
            attempt=attempt,
            node="n1",
            reports=[ProgressReport(at=app.clock.now(), epoch=1, total_epochs=4)],
        )
        r = app.api.post(
            f"/api/v1/agent/jobs/{job_id}/progress",
            headers=app.api.node("n1"),
            json=body.model_dump(mode="json"),
        )
        assert r.status_code == 200, r.text
        j = app.job(job_id)
        # A quarter done after 1 s: 4 s in all, not the 10,000 s estimate.
        assert j.duration_source == "progress"
        assert j.duration_estimate == pytest.approx(4.0)
        assert j.started_at == started
        assert j.predicted_end_at == pytest.approx(started + 4.0)


def test_a_job_its_queue_holds_back_is_not_predicted_to_start_on_free_gpus(api: Api) -> None:
    """Issue 32: with queues declared the forecast runs the policy in the fair-share
    layer, as the scheduler does. A queue at its limit with free GPUs beside it:
    its next job starts when one of its own ends, not "now"."""
    node = WireAgent(api, "n1", gpus=4)
    node.register()
    made = api.post("/api/v1/queues", json={"name": "team-a", "guaranteed": {"": 2}, "limit": 2})
    assert made.status_code == 201, made.text
    held = [
        submit(api, name=f"a{i}", queue="team-a", gpus=1, estimated_duration=100 * (i + 1))
        for i in range(2)
    ]
    starts = node.work_until(lambda b: len(b.starts) == 2).starts
    for s in starts:
        node.start(s.job_id, s.attempt)
    began = time.time()
    for i in held:
        wait_until(partial(job_state, api, i), 10, "team-a's jobs to run", until="running".__eq__)
    waiting = submit(api, name="a2", queue="team-a", gpus=1, estimated_duration=10)
    w = job(api, waiting)
    assert w.state == "pending"
    assert w.waiting_reason == "team-a uses 2 of its limit of 2 GPUs", w.waiting_reason
    # Two GPUs are free, but team-a's first job must end first (~100 s).
    assert w.predicted_start_at == pytest.approx(began + 100, abs=3)
