"""The dashboard's parts that need no browser: the server-side session, the
Submit form's parsing, the metrics' reconstruction of the past from the job
history, progress reading and the job page's metric charts. (The Queue
page's order is tested with the policies: tests/unit/core/test_queue_order.py and
tests/unit/server/test_queue_order_live.py.)

They run with the rest of the suite (no Chromium needed); the history tests
use a real SQLite database migrated like the server's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import Session

from schedulearn.protocol import JobState, PolicyForecast, PolicyPreview, ProgressPublic
from schedulearn.server import db
from schedulearn.server.models import Job, JobTransition
from schedulearn.server.web import forms, history, job_data, metric_chart, previews
from schedulearn.server.web import session as sessions

# --- sessions ----------------------------------------------------------------------


def test_a_session_lives_on_the_server_and_sign_out_ends_it(tmp_path: Path) -> None:
    """The cookie holds only a random id; the row holds its hash; ending it removes it."""
    from sqlmodel import select

    from schedulearn.server.auth import PriorityRange, Role
    from schedulearn.server.models import WebSession
    from schedulearn.server.services import tokens

    database = db.Database(f"sqlite:///{tmp_path / 'x.db'}")
    db.migrate(database.engine)
    bounds = PriorityRange(-100, 0)
    try:
        with database.session() as session:
            row, _secret = tokens.issue(session, "ana", Role.USER, now=1000.0)
            assert row.id is not None
            cookie, csrf = sessions.start(session, row.id, now=1000.0)
            stored = session.exec(select(WebSession)).one()
            assert stored.id_hash != cookie and cookie not in stored.id_hash
            signed = sessions.resolve(session, cookie, 1001.0, bounds)
            assert signed is not None and signed.caller.user == "ana" and signed.csrf == csrf
            assert sessions.resolve(session, cookie + "x", 1001.0, bounds) is None
            assert (
                sessions.resolve(session, cookie, 1000.0 + sessions.SESSION_SECONDS, bounds) is None
            )
            sessions.end(session, cookie, 1001.0)
            assert sessions.resolve(session, cookie, 1001.0, bounds) is None
    finally:
        database.close()
    assert not sessions.same_token("", csrf)
    assert sessions.same_token(csrf, csrf)


# --- the Submit form -----------------------------------------------------------


def test_a_valid_form_makes_the_spec_the_api_would_accept() -> None:
    form = forms.parse(
        {
            "name": "train",
            "command": "python train.py",
            "gpus": "2",
            "memory": "16G",
            "env": "A=1\n# a comment\nB = two=2\n",
            "launcher": "torchrun",
            "preemptible": "on",
            "estimated_duration": "30m",
            "count": "1",
            "max_restarts": "3",
        }
    )
    assert form.errors == {}
    assert form.spec is not None
    assert form.spec.requested_gpus == 2
    assert form.spec.memory_gb == 16
    assert form.spec.env == {"A": "1", "B": " two=2"}
    assert form.spec.launcher.value == "torchrun"
    assert form.spec.preemptible is True
    assert form.spec.estimated_seconds == 1800


def test_every_bad_field_gets_its_own_message_at_once() -> None:
    form = forms.parse(
        {"command": "", "gpus": "two", "memory": "lots", "deadline": "soon", "env": "NOEQUALS"}
    )
    assert form.spec is None
    assert set(form.errors) == {"command", "gpus", "memory", "deadline", "env"}
    assert "Give a command" in form.errors["command"]
    assert "whole number" in form.errors["gpus"]
    assert "not a size" in form.errors["memory"]
    assert "line 1" in form.errors["env"].lower()


def test_sizes_that_disagree_are_shown_beside_min_gpus() -> None:
    form = forms.parse({"command": "x", "min_gpus": "4", "max_gpus": "2"})
    assert form.spec is None
    assert "above max_gpus" in form.errors["min_gpus"]


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ("this job can never run here: no node has 16 GPUs; the largest has 8", "gpus"),
        ("this job can never run here: no node runs container images; drop --image", "image"),
        ("no node has h100 GPUs; the GPU types here are a100; change gpu_type", "gpu_type"),
        ("no node with 2 GPUs has 64 CPUs; the most is 32; ask for at most 32 CPUs", "cpus"),
        ("no node with 2 GPUs has 900 GB of memory; the most is 512 GB", "memory"),
        ("the server is on fire", "__all__"),
    ],
)
def test_a_refusal_is_shown_beside_the_field_it_is_about(message: str, field: str) -> None:
    assert forms.refusal_field(message) == field


# --- metrics history -------------------------------------------------------------


@pytest.fixture
def database(tmp_path: Path) -> db.Database:
    database = db.Database(f"sqlite:///{tmp_path / 'h.db'}")
    db.migrate(database.engine)
    return database


def _job(
    session: Session, job_id: int, gpus: int, submitted: float, steps: list[tuple[float, str]]
) -> None:
    state = steps[-1][1] if steps else "pending"
    started = next((at for at, s in steps if s == "running"), None)
    ended = steps[-1][0] if JobState(state).is_final else None
    session.add(
        Job(
            id=job_id,
            name=f"j{job_id}",
            user="u",
            state=JobState(state),
            command="x",
            gpus=gpus,
            submitted_at=submitted,
            queued_at=submitted,
            started_at=started,
            ended_at=ended,
        )
    )
    previous = "pending"
    for at, to in steps:
        session.add(
            JobTransition(
                job_id=job_id, at=at, from_state=JobState(previous), to_state=JobState(to)
            )
        )
        previous = to


def test_metrics_rebuild_gpus_held_queue_length_and_jct(database: db.Database) -> None:
    now = 10_000.0
    start = now - history.WINDOWS["15m"]
    width = (now - start) / history.BUCKETS  # 7.5 s
    with database.session() as session:
        # Job 1: waits one bucket, then holds 4 GPUs for two buckets, succeeds.
        t0 = start
        _job(
            session,
            1,
            4,
            t0,
            [(t0 + width, "assigned"), (t0 + width, "running"), (t0 + 3 * width, "succeeded")],
        )
        # Job 2: waits the whole window.
        _job(session, 2, 2, start - 100, [])
        # Job 3: cancelled while it waited: no JCT, counted as cancelled.
        _job(session, 3, 1, t0, [(t0 + width / 2, "cancelled")])
        session.commit()
        page = history.metrics_page(session, now, "15m")
    assert len(page.times) == history.BUCKETS
    assert page.queue[0] == 3  # jobs 1, 2 and 3 waited in the first bucket
    assert page.queue[1] == 1 and page.queue[-1] == 1  # only job 2 from then on
    assert page.gpus_held[0] == 0
    assert page.gpus_held[1] == pytest.approx(4) and page.gpus_held[2] == pytest.approx(4)
    assert page.gpus_held[3] == 0
    assert page.jct == [pytest.approx(3 * width)]
    assert page.waits == [pytest.approx(width)]
    assert (page.finished, page.failed, page.cancelled) == (1, 0, 1)
    assert page.total_gpus == 0 and page.util_pct[1] is None  # no node registered


def test_an_unknown_window_falls_back_to_the_default(database: db.Database) -> None:
    with database.session() as session:
        page = history.metrics_page(session, 5000.0, "1y")
    assert page.window == history.DEFAULT_WINDOW and not page.has_activity


# --- progress ------------------------------------------------------------------


def test_progress_is_read_from_a_fraction_or_from_epochs() -> None:
    assert job_data.progress_of(None) is None
    assert job_data.progress_of(0.25) == job_data.Progress(0.25)
    progress = job_data.progress_of({"epoch": 3, "total_epochs": 12, "loss": 0.5, "at": 1.0})
    assert progress is not None and progress.fraction == 0.25
    assert progress.figures == {"epoch": "3", "total_epochs": "12", "loss": "0.5"}
    assert job_data.progress_of({"step": 10}) == job_data.Progress(None, {"step": "10"})


# --- metric charts ----------------------------------------------------------------


def _report(at: float, **fields: object) -> ProgressPublic:
    return ProgressPublic.model_validate({"at": at, **fields})


def test_a_chart_per_reported_metric_drawn_in_step_order() -> None:
    reports = [
        _report(1, step=10, loss=2.0, accuracy=0.1, metrics={"lr": 0.1}),
        _report(2, step=20, loss=1.0, accuracy=0.5),
        # A resumed run reports step 15 again, after step 20: drawn in x order.
        _report(3, step=15, loss=1.5),
    ]
    charts = metric_chart.charts(reports)
    assert charts is not None and charts.x_axis is metric_chart.XAxis.STEP
    assert [s.name for s in charts.series] == ["loss", "accuracy", "lr"]
    loss = charts.series[0]
    assert [(p.x, p.y) for p in loss.points] == [(10, 2.0), (15, 1.5), (20, 1.0)]
    # x grows left to right, a larger value is drawn higher (smaller y), inside the frame.
    xs = [p.px for p in loss.points]
    ys = [p.py for p in loss.points]
    assert xs == sorted(xs) and xs[0] == charts.left and xs[-1] == charts.right
    assert ys == sorted(ys) and charts.top <= ys[0] and ys[-1] <= charts.bottom
    assert loss.path == "M" + " L".join(f"{p.px},{p.py}" for p in loss.points)
    assert [t.label for t in loss.y_ticks] == ["2", "1.5", "1"]
    assert [t.label for t in loss.x_ticks] == ["10", "20"]
    assert len(charts.series[2].points) == 1  # one lr report: one point, still a chart


def test_charts_fall_back_to_epochs_then_report_numbers() -> None:
    by_epoch = metric_chart.charts([_report(1, epoch=1, loss=1.0), _report(2, epoch=2, loss=0.5)])
    assert by_epoch is not None and by_epoch.x_axis is metric_chart.XAxis.EPOCH
    mixed = metric_chart.charts([_report(1, step=5, loss=1.0), _report(2, loss=0.5)])
    assert mixed is not None and mixed.x_axis is metric_chart.XAxis.REPORT
    assert [p.x for p in mixed.series[0].points] == [1, 2]
    # Reports with no metric to draw (only progress figures): no chart.
    assert metric_chart.charts([_report(1, step=3, total_epochs=4)]) is None
    assert metric_chart.charts([]) is None


def test_a_flat_metric_still_gets_a_range() -> None:
    charts = metric_chart.charts([_report(1, step=1, loss=0.0), _report(2, step=2, loss=0.0)])
    assert charts is not None
    (loss,) = charts.series
    assert {p.py for p in loss.points} == {(charts.top + charts.bottom) / 2}


# --- policy preview page -----------------------------------------------------------


def _preview(jcts: dict[str, float | None]) -> PolicyPreview:
    rows = [
        PolicyForecast(
            spec=spec,
            in_force=i == 0,
            mean_jct=jct,
            makespan=jct,
            utilisation=0.5,
            predicted=2,
            unknown=0,
            preemptions=0,
            wall_seconds=0.01,
        )
        for i, (spec, jct) in enumerate(jcts.items())
    ]
    return PolicyPreview(
        at=0.0,
        in_force="fifo",
        pending=1,
        running=1,
        compared=2,
        horizon_seconds=60.0,
        without_estimate=0,
        policies=rows,
    )


def test_the_preview_marks_every_policy_with_the_lowest_mean_jct() -> None:
    assert previews.best_specs(_preview({"fifo": 60, "srtf": 30, "goodput": 30})) == {
        "srtf",
        "goodput",
    }
    # All alike, or a single policy with figures: nothing stands out.
    assert previews.best_specs(_preview({"fifo": 60, "srtf": 60})) == frozenset()
    assert previews.best_specs(_preview({"fifo": 60, "srtf": None})) == frozenset()
    assert previews.page_of(_preview({"fifo": 1})).note == "Figures are over all 2 jobs."
