"""A job's life through the agent API: placement, start, exit, logs, cancel,
gangs, preemption, lost nodes and re-registration. The agent's part is
played by `WireAgent`, a client that speaks the protocol step by step."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from server_api import Api
from sqlmodel import Session
from wire_agent import WireAgent

from schedulearn.protocol import JobEvent, JobEventReport, JobPublic
from schedulearn.server import create_app
from schedulearn.server.wakeups import Changes
from schedulearn.settings import ServerSettings
from waiting import wait_until


def job(api: Api, job_id: int) -> JobPublic:
    return JobPublic.model_validate(api.get(f"/api/v1/jobs/{job_id}").json())


def wait_state(api: Api, job_id: int, *states: str, timeout: float = 10.0) -> JobPublic:
    return wait_until(
        lambda: job(api, job_id),
        timeout,
        f"job {job_id} to be {states}",
        until=lambda j: j.state in states,
    )


def submit(api: Api, **body: object) -> int:
    r = api.post("/api/v1/jobs", json={"command": "x", **body})
    assert r.status_code == 201, r.text
    return int(r.json()["ids"][0])


def history(api: Api, job_id: int) -> list[str]:
    """The job's states as seen from outside, via its message trail in the DB."""
    from sqlmodel import Session, col, select

    from schedulearn.server.models import JobTransition

    engine = api.state.db.engine
    with Session(engine) as s:
        rows = s.exec(
            select(JobTransition)
            .where(col(JobTransition.job_id) == job_id)
            .order_by(col(JobTransition.id))
        ).all()
    return [r.to_state for r in rows]


def test_job_runs_through_its_states_and_logs_follow(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=2)
    node.register()
    job_id = submit(api, gpus=2, env={"A": "1"}, workdir="/tmp")
    work = node.work_until(lambda b: b.starts)
    (a,) = work.starts
    assert (a.job_id, a.attempt, a.gpus, a.env, a.workdir, a.gang) == (
        job_id,
        1,
        [0, 1],
        {"A": "1"},
        "/tmp",
        None,
    )
    assert job(api, job_id).state == "assigned"
    node.start(job_id, 1)
    assert job(api, job_id).state == "running"
    node.log(job_id, 1, "epoch 1", "epoch 2")
    got: list[str] = []

    def follow() -> None:
        with api.client.stream(
            "GET", f"/api/v1/jobs/{job_id}/logs", headers=api.admin, params={"follow": "true"}
        ) as r:
            for line in r.iter_lines():
                got.append(line)

    reader = threading.Thread(target=follow)
    reader.start()
    # The follower has the lines so far: it is connected and waiting for more.
    wait_until(
        lambda: sum('"text"' in line for line in got), 10, "the first lines", until=lambda n: n >= 2
    )
    node.log(job_id, 1, "epoch 3")
    node.exit(job_id, 1, 0)
    reader.join(timeout=10)
    assert not reader.is_alive()
    texts = [line for line in got if line.startswith("data:") and '"text"' in line]
    assert [t.split('"text":"')[1].split('"')[0] for t in texts] == [
        "epoch 1",
        "epoch 2",
        "epoch 3",
    ]
    assert any(line == "event: end" for line in got)
    done = job(api, job_id)
    assert done.state == "succeeded" and done.exit_code == 0 and done.ended_at
    assert history(api, job_id) == ["assigned", "running", "succeeded"]
    # Its GPUs are free again: the next job gets them.
    nxt = submit(api, gpus=2)
    assert node.work_until(lambda b: b.starts).starts[0].job_id == nxt


def test_failure_and_cancel(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=2)
    node.register()
    bad = submit(api, gpus=1)
    long = submit(api, gpus=1)
    starts = node.work_until(lambda b: len(b.starts) == 2).starts
    for s in starts:
        node.start(s.job_id, s.attempt)
    node.exit(bad, 1, 3)
    failed = job(api, bad)
    assert (
        failed.state == "failed"
        and failed.exit_code == 3
        and "exited with code 3" in (failed.message or "")
    )
    r = api.post(f"/api/v1/jobs/{long}/cancel")
    assert r.json()["state"] == "cancelled"
    stops = node.work_until(lambda b: b.stops).stops
    assert [(s.job_id, s.reason) for s in stops] == [(long, "cancel")]
    # The GPU stays held until the process is gone.
    queued = submit(api, gpus=2)
    api.settle()
    assert job(api, queued).state == "pending"
    node.exit(long, 1, -15)
    assert job(api, long).state == "cancelled"  # a late exit does not change a final state
    assert node.work_until(lambda b: b.starts).starts[0].job_id == queued


def test_cancel_before_delivery_frees_at_once(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    first = submit(api)
    wait_state(api, first, "assigned")
    api.post(f"/api/v1/jobs/{first}/cancel")
    second = submit(api)
    batch = node.work_until(lambda b: b.starts)
    assert [s.job_id for s in batch.starts] == [second] and not batch.stops


def test_gang_over_two_nodes_and_its_failure(api: Api) -> None:
    n1, n2 = WireAgent(api, "n1", gpus=4), WireAgent(api, "n2", gpus=4)
    n1.register()
    n2.register()
    job_id = submit(api, gpus=6)
    a1 = n1.work_until(lambda b: b.starts).starts[0]
    a2 = n2.work_until(lambda b: b.starts).starts[0]
    assert a1.gang and a2.gang
    assert {a1.gang.node_rank, a2.gang.node_rank} == {0, 1}
    assert a1.gang.world_size == a2.gang.world_size == 2
    assert a1.gang.master_port == a2.gang.master_port
    assert sorted([len(a1.gpus), len(a2.gpus)]) == [2, 4]
    n1.start(job_id, 1)
    n2.start(job_id, 1)
    n1.exit(job_id, 1, 0)
    assert job(api, job_id).state == "running"  # the other part still runs
    n2.exit(job_id, 1, 0)
    assert job(api, job_id).state == "succeeded"
    # Now one part fails: the other is stopped with gang_failed.
    job2 = submit(api, gpus=8)
    b1 = n1.work_until(lambda b: b.starts).starts[0]
    n2.work_until(lambda b: b.starts)
    n1.start(job2, b1.attempt)
    n2.start(job2, b1.attempt)
    n1.exit(job2, b1.attempt, 1)
    failed = job(api, job2)
    assert failed.state == "failed" and "stopping the other parts" in (failed.message or "")
    stops = n2.work_until(lambda b: b.stops).stops
    assert [(s.job_id, s.reason) for s in stops] == [(job2, "gang_failed")]


@pytest.fixture
def reaping_api(reaping_settings: ServerSettings) -> Iterator[Api]:
    """The app with a node taken down after 2 s of silence."""
    with TestClient(create_app(reaping_settings)) as c:
        yield Api(c)


def test_silent_node_loses_its_jobs_which_are_requeued(reaping_api: Api) -> None:
    api = reaping_api
    dead, alive = WireAgent(api, "dead", gpus=2), WireAgent(api, "alive", gpus=2)
    dead.register()
    job_id = submit(api, gpus=2, max_restarts=1)
    a = dead.work_until(lambda b: b.starts).starts[0]
    dead.start(job_id, a.attempt)
    alive.register()

    # `dead` stops sending heartbeats; `alive` keeps going. (The boundary
    # itself is tested on a manual clock in test_clock_driven.py.)
    with alive.beating():
        wait_until(
            lambda: job(api, job_id).attempt,
            10,
            f"job {job_id} to be lost and placed again",
            until=lambda a: a >= 2,
        )
        b = alive.work_until(lambda b: b.starts).starts[0]
        assert (b.job_id, b.attempt) == (job_id, 2)
        requeued = job(api, job_id)
        # A node going down is not the job failing: it does not use up max_restarts.
        assert requeued.restarts == 0 and requeued.placement == {"alive": [0, 1]}
        assert history(api, job_id) == ["assigned", "running", "lost", "pending", "assigned"]
        nodes = {n["name"]: n for n in api.get("/api/v1/nodes").json()["items"]}
        assert nodes["dead"]["healthy"] is False
        assert all(g["job_id"] is None for g in nodes["dead"]["gpus"])
        # A heartbeat from the dead node asks it to register again.
        assert dead.heartbeat().reregister is True
        alive.start(job_id, 2)
    # Its second node goes down too: requeued again, max_restarts=1 still unused,
    # and the message tells the loss apart from a failure.
    again = wait_state(api, job_id, "pending")
    assert again.restarts == 0
    assert "its node went down: loss 2 of at most 20" in (again.message or "")
    assert "not counted against max_restarts" in (again.message or "")


def test_reregistration_adopts_running_and_loses_vanished(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=2)
    node.register()
    kept, vanished = submit(api), submit(api)
    starts = node.work_until(lambda b: len(b.starts) == 2).starts
    for s in starts:
        node.start(s.job_id, s.attempt)
    # The agent restarts: it still runs `kept`, `vanished` is gone, and it
    # finds a process of a run the server never gave it.
    reply = node.register(running=[(kept, 1), (999, 1)])
    assert reply.adopt == [kept] and reply.lost == [999]
    assert job(api, kept).state == "running"
    v = job(api, vanished)
    # Lost with its node's restart: requeued, not counted as the job's restart.
    assert v.state in ("pending", "assigned") and v.restarts == 0


def test_preempt_returns_job_to_queue(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    api.put("/api/v1/policy", json={"spec": "srtf"})
    slow = submit(api, gpus=1, estimated_duration=3600, preemptible=True)
    a = node.work_until(lambda b: b.starts).starts[0]
    node.start(slow, a.attempt)
    quick = submit(api, gpus=1, estimated_duration=10)
    stops = node.work_until(lambda b: b.stops).stops
    assert [(s.job_id, s.reason) for s in stops] == [(slow, "preempt")]
    assert job(api, slow).state == "preempting"
    node.exit(slow, a.attempt, -15)
    back = wait_state(api, slow, "pending")
    assert (back.message or "").startswith("preempted")
    b = node.work_until(lambda b: b.starts).starts[0]
    assert b.job_id == quick


def _preempting(api: Api, node: WireAgent) -> tuple[int, int]:
    """A running preemptible job that SRTF has begun preempting: (job, attempt)."""
    api.put("/api/v1/policy", json={"spec": "srtf"})
    slow = submit(api, gpus=1, estimated_duration=3600, preemptible=True)
    a = node.work_until(lambda b: b.starts).starts[0]
    node.start(slow, a.attempt)
    submit(api, gpus=1, estimated_duration=10)
    assert [s.job_id for s in node.work_until(lambda b: b.stops).stops] == [slow]
    assert job(api, slow).state == "preempting"
    return slow, a.attempt


@pytest.mark.parametrize(("code", "final"), [(0, "succeeded"), (3, "failed")])
def test_a_run_that_ended_before_its_stop_order_is_judged_on_its_exit(
    api: Api, code: int, final: str
) -> None:
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    ended, attempt = _preempting(api, node)
    node.exit(ended, attempt, code, on_its_own=True)
    judged = wait_state(api, ended, final, "pending")
    assert judged.state == final, judged.message
    assert history(api, ended)[-2:] == ["preempting", final]
    if code == 0:
        assert judged.message == "ended on its own before its preemption took effect"


def test_a_move_that_came_too_late_gives_back_the_gpus_it_reserved(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=2)
    node.register()
    job_id = submit(api, gpus=1, preemptible=True)
    a = node.work_until(lambda b: b.starts).starts[0]
    node.start(job_id, a.attempt)
    # To the other GPU, free now: it is held for the next attempt meanwhile.
    target = {"n1": [1 - a.gpus[0]]}
    assert api.post(f"/api/v1/jobs/{job_id}/move", json={"placement": target}).status_code == 200
    node.work_until(lambda b: b.stops)
    node.exit(job_id, a.attempt, 0, on_its_own=True)
    assert wait_state(api, job_id, "succeeded", "pending").state == "succeeded"
    # Nothing holds either GPU any more: a job that needs both starts.
    both = submit(api, gpus=2)
    assert [s.job_id for s in node.work_until(lambda b: b.starts).starts] == [both]


def test_an_exit_0_after_the_stop_order_reached_the_run_is_a_preemption(api: Api) -> None:
    # It may have saved and stopped on SIGTERM: the job goes back to the queue.
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    stopped, attempt = _preempting(api, node)
    node.exit(stopped, attempt, 0)
    assert wait_state(api, stopped, "pending", "succeeded").state == "pending"


def test_policy_switch_takes_effect_on_the_next_pass(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=4)
    node.register()
    blocker = submit(api, gpus=3)
    node.work_until(lambda b: b.starts)
    node.start(blocker, 1)
    head = submit(api, gpus=4)
    small = submit(api, gpus=1, estimated_duration=5)
    api.settle()
    assert job(api, small).state == "pending"  # plain FIFO: it waits behind the head
    # SRTF (without preemption) skips the blocked head and starts the short job.
    r = api.put("/api/v1/policy", json={"spec": "srtf:preempt=false"})
    assert r.status_code == 200
    starts = node.work_until(lambda b: b.starts).starts
    assert [s.job_id for s in starts] == [small]
    assert job(api, head).state == "pending"


def test_concurrent_submissions_never_share_a_gpu(api: Api) -> None:
    nodes = [WireAgent(api, f"n{i}", gpus=4) for i in range(3)]
    for n in nodes:
        n.register()
    errors: list[str] = []

    def burst() -> None:
        for _ in range(10):
            r = api.post("/api/v1/jobs", json={"command": "x", "gpus": 1 + (time.time_ns() % 3)})
            if r.status_code != 201:
                errors.append(r.text)

    threads = [threading.Thread(target=burst) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    api.settle()  # every submission has been through a scheduling round
    held: dict[tuple[str, int], int] = {}
    for n in nodes:
        for a in n.work(wait=0.1).starts:
            for g in a.gpus:
                assert (n.name, g) not in held, f"GPU {g} of {n.name} given twice"
                held[(n.name, g)] = a.job_id
    assert len(held) <= 12 and len(held) >= 10  # the cluster is (nearly) full


def test_a_batch_of_events_moves_each_job_on(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=3)
    node.register()
    a, b, c = (submit(api, gpus=1) for _ in range(3))
    node.work_until(lambda w: len(w.starts) == 3)
    replies = node.events(
        (a, 1, "started", None),
        (a, 1, "exited", 0),
        (b, 1, "started", None),
        (b, 1, "exited", 3),
        (c, 1, "started", None),
        (c, 2, "exited", 0),  # an attempt that never ran
        (999_999, 1, "exited", 0),  # a job that does not exist
    )
    assert [(r.ok, r.ignored) for r in replies.acks] == [(True, False)] * 5 + [(True, True)] * 2
    assert history(api, a) == ["assigned", "running", "succeeded"]
    assert (job(api, b).state, job(api, b).exit_code) == ("failed", 3)
    assert job(api, c).state == "running"
    # The GPUs of a and b are free again.
    d, e = submit(api, gpus=1), submit(api, gpus=1)
    assert {s.job_id for s in node.work_until(lambda w: len(w.starts) == 2).starts} == {d, e}


def test_an_event_that_fails_costs_the_rest_of_its_batch_nothing(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from schedulearn.server.services import agents, event_batch

    node = WireAgent(api, "n1", gpus=3)
    node.register()
    a, b, c = (submit(api, gpus=1) for _ in range(3))
    node.work_until(lambda w: len(w.starts) == 3)
    real, real_batch = agents._apply_event, event_batch.record

    def failing_for_b(session: Session, job_id: int, event: JobEvent, now: float) -> Changes:
        if job_id == b:
            raise RuntimeError("the database failed on this one")
        return real(session, job_id, event, now)

    def batch_failing_with_b(
        session: Session, reports: list[JobEventReport], now: float
    ) -> event_batch.BatchPlan:
        plan = real_batch(session, reports, now)  # its statements run, then are rolled back
        if any(r.job_id == b for r in reports):
            raise RuntimeError("the database failed on the batch")
        return plan

    monkeypatch.setattr(agents, "_apply_event", failing_for_b)
    monkeypatch.setattr(event_batch, "record", batch_failing_with_b)
    replies = node.events(*((j, 1, "started", None) for j in (a, b, c)))
    assert [r.ok for r in replies.acks] == [True, False, True]
    assert [job(api, j).state for j in (a, b, c)] == ["running", "assigned", "running"]
    # Sent again once the failure has passed, it is recorded.
    monkeypatch.setattr(agents, "_apply_event", real)
    monkeypatch.setattr(event_batch, "record", real_batch)
    assert node.events((b, 1, "started", None)).acks[0].ok
    assert job(api, b).state == "running"


def test_a_bad_policy_option_is_a_400_naming_what_it_takes(api: Api) -> None:
    before = api.get("/api/v1/policy").json()["spec"]
    for spec, takes in (
        ("fifo:backfill=maybe", "backfill takes true or false, not 'maybe'"),
        ("timeslice:quantum=abc", "quantum takes a number, not 'abc'"),
    ):
        r = api.put("/api/v1/policy", json={"spec": spec})
        assert r.status_code == 400 and takes in r.text, r.text
    assert api.get("/api/v1/policy").json()["spec"] == before
