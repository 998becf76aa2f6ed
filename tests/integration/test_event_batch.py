"""A batch of agent events is recorded set-based (`services.event_batch`):
a fixed number of statements whatever its size, the same outcome as
event by event, gangs and preemptions through lifecycle's own rules, and
`states.transition_many` fenced on the state each job was read in."""

from __future__ import annotations

import time
from typing import Any

import pytest
from server_api import Api
from sqlalchemy import Connection, event, select
from sqlmodel import Session, col
from test_api_lifecycle import history, job, submit
from wire_agent import WireAgent

from schedulearn.protocol import Ack, EventKind, JobEventReport, JobState
from schedulearn.server.models import Allocation, Job
from schedulearn.server.services import agents
from schedulearn.server.states import IllegalTransition, StaleState, Step, transition_many


def record_counting(api: Api, reports: list[JobEventReport]) -> tuple[list[Ack], list[str]]:
    """Record `reports` as the events route does, in a session of our own; returns
    (the acks, the statements this session ran: an executemany is one)."""
    engine = api.state.db.engine
    seen: list[str] = []

    def count(
        conn: Connection,
        cursor: Any,
        statement: str,
        params: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        seen.append(statement)

    with Session(engine, expire_on_commit=False) as session:
        conn = session.connection()
        event.listen(conn, "before_cursor_execute", count)
        done = agents.record_events(session, reports, time.time())
    return done.acks, seen


def run_batch_of(api: Api, node: WireAgent, n: int) -> list[str]:
    ids = [submit(api, gpus=1) for _ in range(n)]
    node.work_until(lambda w: len(w.starts) == n)
    reports = [
        JobEventReport(job_id=j, attempt=1, node="n1", kind=kind, exit_code=code, at=0.0)
        for j in ids
        for kind, code in ((EventKind.STARTED, None), (EventKind.EXITED, 0))
    ]
    acks, seen = record_counting(api, reports)
    assert [(r.ok, r.ignored) for r in acks] == [(True, False)] * (2 * n)
    for j in ids:
        assert history(api, j) == ["assigned", "running", "succeeded"]
    return seen


def test_a_batch_costs_the_same_statements_whatever_its_size(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=24)
    node.register()
    two = run_batch_of(api, node, 2)
    twenty = run_batch_of(api, node, 20)
    # Reads of the jobs and their parts, one update of the parts, one delete of
    # their GPUs, one update of the jobs, one insert of their history.
    assert len(two) == len(twenty) <= 8, twenty
    # And every GPU was given back.
    engine = api.state.db.engine
    with Session(engine) as s:
        assert s.execute(select(Allocation)).all() == []


def test_a_gang_in_a_batch_follows_lifecycle(api: Api) -> None:
    n1, n2 = WireAgent(api, "n1", gpus=4), WireAgent(api, "n2", gpus=4)
    n1.register()
    n2.register()
    gang = submit(api, gpus=8)
    n1.work_until(lambda b: b.starts)
    n2.work_until(lambda b: b.starts)
    assert [a.ok for a in n1.events((gang, 1, "started", None), (gang, 1, "exited", 0)).acks] == [
        True,
        True,
    ]
    assert job(api, gang).state == "running"  # the part on n2 runs on
    n2.events((gang, 1, "started", None), (gang, 1, "exited", 0))
    assert history(api, gang) == ["assigned", "running", "succeeded"]
    # One part fails: the job fails and the other part gets a stop order.
    gang2 = submit(api, gpus=8)
    n1.work_until(lambda b: b.starts)
    n2.work_until(lambda b: b.starts)
    n2.events((gang2, 1, "started", None))
    n1.events((gang2, 1, "started", None), (gang2, 1, "exited", 1))
    failed = job(api, gang2)
    assert failed.state == "failed" and "stopping the other parts" in (failed.message or "")
    stops = n2.work_until(lambda b: b.stops).stops
    assert [(x.job_id, x.reason) for x in stops] == [(gang2, "gang_failed")]


def test_a_preempted_jobs_exit_in_a_batch_requeues_it(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=2)
    node.register()
    api.put("/api/v1/policy", json={"spec": "srtf"})
    long = submit(api, gpus=1, estimated_duration=3600, preemptible=True)
    other = submit(api, gpus=1, estimated_duration=600)
    starts = node.work_until(lambda b: len(b.starts) == 2).starts
    node.events(*((a.job_id, a.attempt, "started", None) for a in starts))
    quick = submit(api, gpus=1, estimated_duration=10)
    stops = node.work_until(lambda b: b.stops).stops
    assert [(x.job_id, x.reason) for x in stops] == [(long, "preempt")]
    # In one batch: the preempted job's exit (lifecycle's requeue) and an
    # ordinary success (set-based).
    acks = node.events((long, 1, "exited", -15), (other, 1, "exited", 0))
    assert [(a.ok, a.ignored) for a in acks.acks] == [(True, False), (True, False)]
    assert history(api, other) == ["assigned", "running", "succeeded"]
    assert history(api, long)[:4] == ["assigned", "running", "preempting", "pending"]
    started = {a.job_id for a in node.work_until(lambda b: len(b.starts) == 2).starts}
    assert started == {quick, long}


def test_an_old_attempts_events_move_nothing(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    j = submit(api, gpus=1)
    node.work_until(lambda w: w.starts)
    acks = node.events((j, 7, "started", None), (j, 7, "exited", 1), (j, 1, "started", None))
    assert [a.ignored for a in acks.acks] == [False, True, False]
    assert history(api, j) == ["assigned", "running"]


def test_transition_many_is_fenced_on_the_state_it_was_read_in(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=2)
    node.register()
    a, b = submit(api, gpus=1), submit(api, gpus=1)
    node.work_until(lambda w: len(w.starts) == 2)
    engine = api.state.db.engine
    with Session(engine) as s:
        # b is assigned, not running: the whole call fails and writes nothing.
        steps = [
            Step(a, 1, JobState.ASSIGNED, JobState.RUNNING, 1.0),
            Step(b, 1, JobState.RUNNING, JobState.SUCCEEDED, 1.0),
        ]
        with pytest.raises(StaleState):
            transition_many(s, steps)
        s.rollback()
        with pytest.raises(IllegalTransition):
            transition_many(s, [Step(a, 1, JobState.ASSIGNED, JobState.PENDING, 1.0)])
        s.rollback()
        # Two steps of one job fold into one update, with a history row each.
        transition_many(
            s,
            [
                Step(a, 1, JobState.ASSIGNED, JobState.RUNNING, 2.0),
                Step(a, 1, JobState.RUNNING, JobState.SUCCEEDED, 3.0, "", {"exit_code": 0}),
            ],
        )
        s.commit()
        row = s.execute(
            select(col(Job.state), col(Job.started_at), col(Job.ended_at)).where(col(Job.id) == a)
        ).one()
    assert tuple(row) == ("succeeded", 2.0, 3.0)
    assert history(api, a) == ["assigned", "running", "succeeded"]
    assert history(api, b) == ["assigned"]
