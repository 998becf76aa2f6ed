"""The server's side of leases on a `ManualClock`: what each reply grants, and the
refusal of every report about a part the server wrote off (a superseded attempt).

Real server code in-process (`stepped.py`), agents played by hand
(`wire_agent.py`); the agent's side runs as real processes in
tests/integration/agent/test_one_live_copy.py.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from collections.abc import Iterator
from typing import Any

import pytest
from stepped import Stepped, stepped_app
from wire_agent import WireAgent

from schedulearn.protocol import (
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    EventKind,
    JobEvent,
    LogBatch,
    LogLine,
    ProgressBatch,
    ProgressReport,
)
from schedulearn.settings import ServerSettings

# The integration settings' `reaping_settings` (tests/integration/conftest.py):
# node timeout 2 s, so the lease is 1.5 s and its grace 0.3 s.
NODE_TIMEOUT = 2.0


@pytest.fixture
def app(reaping_settings: ServerSettings) -> Iterator[Stepped]:
    assert reaping_settings.node_timeout_seconds == NODE_TIMEOUT
    with stepped_app(reaping_settings) as stepped:
        yield stepped


def test_each_reply_grants_the_lease_and_a_node_marked_down_gets_none(app: Stepped) -> None:
    node = WireAgent(app.api, "n1", gpus=1)
    # As this release's agent speaks (protocol 1's replies have no lease fields).
    node.headers[PROTOCOL_HEADER] = str(PROTOCOL_VERSION)
    reply = node.register()
    assert (reply.lease_seconds, reply.lease_grace_seconds) == pytest.approx((1.5, 0.3))
    beat = node.heartbeat()
    assert (beat.lease_seconds, beat.lease_grace_seconds) == pytest.approx((1.5, 0.3))
    app.advance(NODE_TIMEOUT + 0.1)
    app.schedule()  # reaps the silent node
    beat = node.heartbeat()
    assert beat.reregister and beat.lease_seconds is None


def superseded_on(app: Stepped) -> tuple[WireAgent, WireAgent, int]:
    """A job whose attempt 1 on `old` was written off and runs again as attempt 2 on `new`."""
    old, new = WireAgent(app.api, "old", gpus=1), WireAgent(app.api, "new", gpus=1)
    old.register()
    job_id = app.submit(gpus=1, preemptible=True)
    app.schedule()
    (start,) = old.work(wait=0).starts
    old.start(job_id, start.attempt)
    old.log(job_id, 1, "first copy")
    new.register()
    # Past the node timeout: `old` is reaped, the job placed on `new` as attempt 2.
    app.advance(NODE_TIMEOUT + 0.1)
    new.heartbeat()
    app.schedule()
    (again,) = new.work(wait=0).starts
    assert (again.job_id, again.attempt) == (job_id, 2)
    new.start(job_id, 2)
    return old, new, job_id


def test_reports_of_a_superseded_attempt_are_refused_and_change_nothing(app: Stepped) -> None:
    old, new, job_id = superseded_on(app)
    before = app.job(job_id)
    assert (before.state, before.attempt) == ("running", 2)
    lines_before = app.api.get(f"/api/v1/jobs/{job_id}/logs").json()["lines"]

    def post(path: str, body: object) -> tuple[int, str]:
        r = app.api.post(f"/api/v1/agent/jobs/{job_id}{path}", headers=old.headers, json=body)
        return r.status_code, r.text

    exited = JobEvent(attempt=1, node="old", kind=EventKind.EXITED, exit_code=0, at=time.time())
    status, text = post("/events", exited.model_dump(mode="json"))
    assert status == 409, text
    assert "attempt 1 of job" in text and "superseded by attempt 2" in text
    logs = LogBatch(attempt=1, node="old", lines=[LogLine(seq=1, text="stale", at=time.time())])
    assert post("/logs", logs.model_dump(mode="json"))[0] == 409
    progress = ProgressBatch(
        attempt=1, node="old", reports=[ProgressReport(at=time.time(), step=9)]
    )
    assert post("/progress", progress.model_dump(mode="json"))[0] == 409
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w"):
        pass
    upload = app.api.put(
        f"/api/v1/agent/jobs/{job_id}/checkpoint",
        params={"attempt": 1, "node": "old"},
        headers={**old.headers, "X-Checkpoint-Sha256": hashlib.sha256(tar.getvalue()).hexdigest()},
        content=tar.getvalue(),
    )
    assert upload.status_code == 409, upload.text
    # In a batch, the stale event is acknowledged as ignored, and the others recorded.
    other = app.submit(gpus=1)
    acks = old.events((job_id, 1, "exited", 0), (other, 1, "exited", 0))
    assert acks.acks[0].ignored is True

    after = app.job(job_id)
    assert (after.state, after.attempt, after.exit_code) == ("running", 2, None)
    assert after.progress is None and after.checkpoint is None
    assert app.api.get(f"/api/v1/jobs/{job_id}/logs").json()["lines"] == lines_before
    # The current attempt reports as ever.
    new.exit(job_id, 2, 0)
    assert app.job(job_id).state == "succeeded"


def test_a_part_of_the_current_attempt_is_not_refused(app: Stepped) -> None:
    node = WireAgent(app.api, "n1", gpus=1)
    node.register()
    job_id = app.submit(gpus=1)
    app.schedule()
    (start,) = node.work(wait=0).starts
    node.start(job_id, start.attempt)
    node.log(job_id, start.attempt, "hello")
    node.exit(job_id, start.attempt, 3)
    job = app.job(job_id)
    assert (job.state, job.exit_code) == ("failed", 3)


def lost_and_requeued(app: Stepped) -> tuple[WireAgent, int]:
    """A job whose only node went silent past the node timeout: its part
    written off, the job requeued, and no other node to run it again."""
    node = WireAgent(app.api, "n1", gpus=1)
    node.register()
    job_id = app.submit(gpus=1)
    app.schedule()
    (start,) = node.work(wait=0).starts
    node.start(job_id, start.attempt)
    app.advance(NODE_TIMEOUT + 0.1)
    app.schedule()  # reaps the silent node
    job = app.job(job_id)
    assert (job.state, job.attempt) == ("pending", 1)
    return node, job_id


def late_exit(app: Stepped, node: WireAgent, job_id: int) -> Any:
    """`node` reports that attempt 1 of the job exited 0: the raw reply (a
    refusal is what some tests expect; `WireAgent.exit` asserts a 200)."""
    event = JobEvent(attempt=1, node=node.name, kind=EventKind.EXITED, exit_code=0, at=time.time())
    return app.api.post(
        f"/api/v1/agent/jobs/{job_id}/events",
        headers=node.headers,
        json=event.model_dump(mode="json"),
    )


def test_an_exit_reported_late_stands_when_the_job_has_not_run_again(app: Stepped) -> None:
    """The copy ended on its own while its agent was down; the agent, back,
    reports it: the job succeeds and is not run a second time."""
    node, job_id = lost_and_requeued(app)
    node.register(running=[(job_id, 1)])
    node.exit(job_id, 1, 0)  # 200, not a 409 refusal
    job = app.job(job_id)
    assert (job.state, job.exit_code, job.attempt) == ("succeeded", 0, 1)
    history = app.api.get(f"/api/v1/jobs/{job_id}/history").json()["transitions"]
    assert [t["to_state"] for t in history][-3:] == ["lost", "pending", "succeeded"]
    assert "the exit stands" in history[-1]["message"], history[-1]
    node.heartbeat()
    app.schedule()
    assert node.work(wait=0).starts == []  # nothing runs again


def test_a_late_exit_drops_a_next_attempt_not_yet_sent_to_any_agent(app: Stepped) -> None:
    """Back, the agent registers, and the server places the job on it again
    before its late exit arrives (it reports before asking for work): that
    unsent assignment is dropped, and the exit stands."""
    node, job_id = lost_and_requeued(app)
    node.register()
    app.schedule()
    job = app.job(job_id)
    assert (job.state, job.attempt) == ("assigned", 2)
    node.exit(job_id, 1, 0)
    job = app.job(job_id)
    assert (job.state, job.attempt, job.placement) == ("succeeded", 1, {"n1": [0]})
    assert node.work(wait=0).starts == []
    # Its GPU is free again: the next job is placed.
    other = app.submit(gpus=1)
    app.schedule()
    assert [s.job_id for s in node.work(wait=0).starts] == [other]


def test_a_late_exit_is_refused_once_the_next_attempt_was_sent(app: Stepped) -> None:
    node, job_id = lost_and_requeued(app)
    node.register()
    app.schedule()
    (start,) = node.work(wait=0).starts  # sent: it may be running by now
    assert start.attempt == 2
    r = late_exit(app, node, job_id)
    assert r.status_code == 409, r.text
    assert app.job(job_id).state == "assigned"


def test_a_failing_exit_reported_late_in_a_batch_fails_the_job(app: Stepped) -> None:
    node, job_id = lost_and_requeued(app)
    node.register(running=[(job_id, 1)])
    acks = node.events((job_id, 1, "exited", 3))
    assert acks.acks[0].ok and not acks.acks[0].ignored
    job = app.job(job_id)
    assert (job.state, job.exit_code) == ("failed", 3)


def test_a_gang_runs_again_only_once_its_other_parts_have_stopped(app: Stepped) -> None:
    """One part's node is lost: the others get a stop order, and the job waits
    in `lost`, its new attempt unplaced though a node has room, until the
    last of them has exited. A late exit of the lost part says nothing of the
    whole run: it is refused."""
    a, b = WireAgent(app.api, "a", gpus=1), WireAgent(app.api, "b", gpus=1)
    a.register()
    b.register()
    job_id = app.submit(gpus=2)
    app.schedule()
    for node in (a, b):
        (start,) = node.work(wait=0).starts
        node.start(job_id, start.attempt)
    spare = WireAgent(app.api, "spare", gpus=2)
    spare.register()
    for _ in range(2):  # `a` falls silent past the node timeout; the others beat
        app.advance(NODE_TIMEOUT / 2 + 0.1)
        b.heartbeat()
        spare.heartbeat()
    app.schedule()  # reaps `a`
    job = app.job(job_id)
    assert job.state == "lost" and "once its other 1 part(s) have stopped" in (job.message or "")
    (order,) = b.work(wait=0).stops
    assert (order.job_id, order.attempt, order.reason) == (job_id, 1, "lost")
    app.schedule()
    assert spare.work(wait=0).starts == []  # not beside b's part of attempt 1
    a.register(running=[(job_id, 1)])
    r = late_exit(app, a, job_id)
    assert r.status_code == 409, r.text
    b.exit(job_id, 1, -15)  # b's part obeyed the stop order
    assert app.job(job_id).state == "pending"
    app.schedule()
    (again,) = spare.work(wait=0).starts
    assert (again.job_id, again.attempt) == (job_id, 2)
