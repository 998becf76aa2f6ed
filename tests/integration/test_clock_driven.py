"""The server's time-dependent rules on a `ManualClock`: node timeout, the
grace for parts missing from heartbeats, silence while the server was down,
timeslice quanta, the forecast's time-to-live. Each test stands one step
short of the boundary (nothing happens), then one step past it (it happens),
in the same setup: neither half can pass by accident.

The clock is the app's (`create_app(settings, clock)`), the scheduler runs
a round only when the test calls `schedule()`; see `stepped.py`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from stepped import T0, Stepped, stepped_app
from wire_agent import WireAgent

from schedulearn.server.services import lifecycle
from schedulearn.server.services.predictions import Predictor
from schedulearn.settings import ServerSettings
from waiting import wait_until

# The integration settings' `reaping_settings`: heartbeat 0.5 s, node timeout
# 2 s, so a part missing from heartbeats is lost after max(3 * 0.5, 5) = 5 s.
NODE_TIMEOUT = 2.0
REPORT_GRACE = 5.0


@pytest.fixture
def timed(reaping_settings: ServerSettings) -> ServerSettings:
    assert reaping_settings.node_timeout_seconds == NODE_TIMEOUT
    return reaping_settings


@pytest.fixture
def app(timed: ServerSettings) -> Iterator[Stepped]:
    with stepped_app(timed) as stepped:
        yield stepped


def running_on(app: Stepped, node: WireAgent, **job: object) -> tuple[int, int]:
    """A job placed on `node` and reported started there: (id, attempt)."""
    job_id = app.submit(**job)
    app.schedule()
    (start,) = node.work(wait=0).starts
    assert start.job_id == job_id
    node.start(job_id, start.attempt)
    assert app.job(job_id).state == "running"
    return job_id, start.attempt


def test_a_node_is_down_only_once_silent_past_the_timeout(app: Stepped) -> None:
    dead, alive = WireAgent(app.api, "dead", gpus=2), WireAgent(app.api, "alive", gpus=2)
    dead.register()
    job_id, _ = running_on(app, dead, gpus=2, max_restarts=1)
    alive.register()

    app.advance(NODE_TIMEOUT - 0.1)  # `dead` silent just short of the timeout
    alive.heartbeat()
    app.schedule()
    assert app.node_healthy("dead") and app.job(job_id).state == "running"

    app.advance(0.2)  # now past it; `alive` answered 0.2 s ago
    alive.heartbeat()
    app.schedule()  # reaps `dead`, then places the requeued job on `alive`
    assert not app.node_healthy("dead") and app.node_healthy("alive")
    requeued = app.job(job_id)
    # Its node went down: requeued without using up one of its max_restarts.
    assert (requeued.state, requeued.restarts, requeued.placement) == (
        "assigned",
        0,
        {"alive": [0, 1]},
    )
    (start,) = alive.work(wait=0).starts
    assert (start.job_id, start.attempt) == (job_id, 2)
    # A heartbeat from the dead node asks it to register again.
    assert dead.heartbeat().reregister is True


def test_node_losses_are_counted_apart_and_fail_the_job_only_past_their_own_limit(
    app: Stepped, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifecycle, "MAX_NODE_LOSSES", 1)
    first, second = WireAgent(app.api, "first", gpus=1), WireAgent(app.api, "second", gpus=1)
    first.register()
    job_id, _ = running_on(app, first, gpus=1, max_restarts=1)
    second.register()
    app.advance(NODE_TIMEOUT + 0.1)
    second.heartbeat()
    app.schedule()
    (start,) = second.work(wait=0).starts
    second.start(job_id, start.attempt)
    assert app.job(job_id).state == "running"  # lost once, restarted

    assert app.job(job_id).restarts == 0  # max_restarts=1 is not touched

    app.advance(NODE_TIMEOUT + 0.1)  # now `second` goes silent too: past the limit of 1
    app.schedule()
    final = app.job(job_id)
    assert final.state == "failed"
    assert "its node went down under it 2 times" in (final.message or "")
    assert final.restarts == 0


def test_silence_while_the_server_was_down_does_not_count(timed: ServerSettings) -> None:
    with stepped_app(timed) as before:
        node = WireAgent(before.api, "n1", gpus=1)
        node.register()
        stopped_at = before.clock.now()
    # The server comes back an hour later: the node has not been heard from
    # for an hour, but the server only listens again from now.
    with stepped_app(timed, start=stopped_at + 3600) as after:
        after.schedule()
        assert after.node_healthy("n1")
        after.advance(NODE_TIMEOUT - 0.1)
        after.schedule()
        assert after.node_healthy("n1")
        after.advance(0.2)
        after.schedule()
        assert not after.node_healthy("n1")


def test_a_part_missing_from_heartbeats_is_lost_after_the_grace(app: Stepped) -> None:
    node = WireAgent(app.api, "n1", gpus=1)
    node.register()
    job_id, _ = running_on(app, node, gpus=1, max_restarts=1)
    node.running.pop(job_id)  # the agent stops listing it in its heartbeats
    # Heartbeats every second keep the node itself up (timeout 2 s).
    for _ in range(int(REPORT_GRACE)):
        app.advance(1.0)
        node.heartbeat()
        assert app.job(job_id).state == "running"
    app.advance(0.5)  # 5.5 s since it was last reported
    node.heartbeat()
    lost = app.job(job_id)
    assert lost.state == "pending" and lost.restarts == 1, lost
    assert app.node_healthy("n1")


def test_timeslice_preempts_a_job_only_after_its_quantum(app: Stepped) -> None:
    node = WireAgent(app.api, "n1", gpus=1)
    node.register()
    r = app.api.put("/api/v1/policy", json={"spec": "timeslice:quantum=60"})
    assert r.status_code == 200, r.text
    first, attempt = running_on(app, node, gpus=1, preemptible=True)
    waiting = app.submit(gpus=1, preemptible=True)

    app.advance(59.0)
    node.heartbeat()
    app.schedule()
    assert node.work(wait=0).stops == [] and app.job(first).state == "running"
    assert app.job(waiting).state == "pending"

    app.advance(2.0)  # 61 s into its slice
    node.heartbeat()
    app.schedule()
    stops = node.work(wait=0).stops
    assert [(s.job_id, s.reason) for s in stops] == [(first, "preempt")]
    node.exit(first, attempt, -15)
    app.schedule()
    (start,) = node.work(wait=0).starts
    assert start.job_id == waiting


def _queued_behind_a_blocker(app: Stepped) -> tuple[int, Predictor]:
    """A 50 s job queued behind a 100 s one on a 1-GPU node, and the app's
    predictor with every forecast made in the request: a forecast's cost is
    measured in real time, and on a loaded machine one made while the test
    set up may have cost more than the marks for keeping a slow one longer
    (`slow_seconds`) or redoing it in the background (`background_seconds`);
    these tests are about the clock's part."""
    node = WireAgent(app.api, "n1", gpus=1)
    node.register()
    running_on(app, node, gpus=1, estimated_duration=100)
    queued = app.submit(gpus=1, estimated_duration=50)
    predictor: Predictor = app.api.state.predictions
    predictor.slow_seconds = math.inf
    predictor.background_seconds = math.inf
    return queued, predictor


def test_a_cached_forecast_is_served_until_its_time_to_live(app: Stepped) -> None:
    queued, predictor = _queued_behind_a_blocker(app)
    first = app.job(queued).predicted_start_at
    assert first == pytest.approx(T0 + 100)  # when the blocker ends
    made = predictor.computed
    lifetime = max(predictor.ttl_seconds, 20 * predictor._cost)
    app.advance(lifetime - 0.5)
    assert app.job(queued).predicted_start_at == first  # the same forecast, served again
    assert predictor.computed == made

    app.advance(1.0)  # past its time to live: forecast again
    again = app.job(queued).predicted_start_at
    assert predictor.computed == made + 1
    assert again == pytest.approx(first)  # the blocker still ends at +100


def test_a_slow_forecast_is_redone_in_the_background_while_the_last_one_is_served(
    app: Stepped,
) -> None:
    queued, predictor = _queued_behind_a_blocker(app)
    assert app.job(queued).predicted_start_at == pytest.approx(T0 + 100)
    made = predictor.computed
    # From now on every forecast counts as slow, and as slow enough to be
    # redone in the background (issue 36: 10,000 queued take up to 2 s).
    predictor.slow_seconds = 0.0
    predictor.background_seconds = 0.0

    app.advance(max(predictor.ttl_seconds, 20 * predictor._cost) + 1)  # due again
    later = app.submit(gpus=1, estimated_duration=30)
    # The listing does not wait: it gets the last forecast, which knew no `later`.
    assert app.job(later).predicted_start_at is None
    # ... while the new one is made, and served once made.
    wait_until(lambda: predictor.computed, 10, "the forecast redone", until=(made + 1).__le__)
    assert app.job(later).predicted_start_at == pytest.approx(T0 + 150, abs=2)
