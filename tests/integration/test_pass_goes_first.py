"""The scheduler's round goes ahead of the requests queued for the database
threads (issue 36: on SQLite's one thread a pass queued first-come behind
every listing, event batch and log batch waited seconds while GPUs stood
free).

Every database thread of a real app is held busy; a real submission (the
route's group commit, `state.submitter`) is queued, then a scheduler
round. One thread is let go: it must take the round, which therefore
does not see the submission queued before it, and ends while the
submission still waits. Without the priority the thread takes the
submission first. The order is asserted, no timing: each step waits for
the queue to say what it holds.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from server_api import Api, on_app_loop
from sqlmodel import Session
from wire_agent import WireAgent

from schedulearn.core import Start
from schedulearn.protocol import JobSpec
from schedulearn.server.auth import Caller
from schedulearn.server.auth import Role as CallerRole
from schedulearn.server.scheduler import Round
from schedulearn.server.services import scheduling
from schedulearn.server.services.idempotency import Submission

PATIENCE = 60.0  # seconds a step may take on a loaded machine before the test gives up


def until(what: str, ok: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not ok():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def test_a_round_goes_ahead_of_a_request_queued_before_it(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=2)
    node.register()
    state = api.state
    db, scheduler = state.db, state.scheduler
    on_app_loop(api.client, scheduler.stop)  # the test queues the round itself
    r = api.post("/api/v1/jobs", json={"command": ["true"], "gpus": 1})
    assert r.status_code == 201, r.text
    queued_first = int(r.json()["ids"][0])

    # Every database thread held: one let go by `first_free`, the rest by `rest_free`.
    first_free, rest_free = threading.Event(), threading.Event()
    holding: list[int] = []

    def hold(_session: Session, gate: threading.Event) -> None:
        holding.append(1)
        gate.wait(PATIENCE)

    async def hold_all() -> list[asyncio.Future[None]]:
        gates = [first_free] + [rest_free] * (db.threads - 1)
        return [asyncio.ensure_future(db.run(hold, gate)) for gate in gates]

    holds = on_app_loop(api.client, hold_all)
    until("every database thread to be held", lambda: len(holding) == db.threads)

    async def submit() -> asyncio.Future[Any]:
        spec = JobSpec(command=["true"], gpus=1)
        add = state.submitter.add(Submission(spec, Caller("admin", CallerRole.ADMIN)))
        return asyncio.ensure_future(add)

    submission = on_app_loop(api.client, submit)
    until("the submission to be queued", lambda: db.waiting() == (0, 1))

    async def round_() -> asyncio.Future[Any]:
        return asyncio.ensure_future(scheduler.run_once())

    round_future = on_app_loop(api.client, round_)
    until("the round to be queued", lambda: sum(db.waiting()) == 2)

    # One thread free: it takes whichever goes first, then the other (on
    # PostgreSQL the other three stay held, so the two never run at once).
    first_free.set()
    until("the round and the submission to end", lambda: round_future.done() and submission.done())
    rest_free.set()
    until("the holds to end", lambda: all(h.done() for h in holds))

    done = round_future.result()
    assert done.result is not None
    # The round ran before the submission's commit: it started only the job
    # queued before (after it, it would have started both on the two GPUs).
    assert done.result.started == [queued_first], "the submission queued first ran first"
    later = submission.result().jobs[0].id
    assert api.get(f"/api/v1/jobs/{later}").json()["state"] == "pending"


def test_a_start_waits_when_its_job_or_node_changed_while_the_policy_decided(api: Api) -> None:
    """The policy decides off the database thread, so requests commit between
    a pass's read and its write. A job held or cancelled meanwhile, or one
    placed on a node drained meanwhile, is not started; the job left alone
    is (fifo: one job a node, each node has one GPU)."""
    for name in ("n1", "n2", "n3", "n4"):
        WireAgent(api, name, gpus=1).register()
    state = api.state
    scheduler = state.scheduler
    on_app_loop(api.client, scheduler.stop)  # the test runs the round by hand
    ids = []
    for _ in range(4):
        r = api.post("/api/v1/jobs", json={"command": ["true"], "gpus": 1})
        assert r.status_code == 201, r.text
        ids.append(int(r.json()["ids"][0]))
    held, cancelled, drained_on, kept = ids

    reading = state.db.call(scheduler._read)
    assert not isinstance(reading, Round) and reading.prepared is not None
    reading.prepared.queued = scheduler.kept.pending.queued_at
    decisions = scheduling.decide(reading.prepared, reading.policy)
    starts = {d.job_id: d for d in decisions if isinstance(d, Start)}
    assert sorted(starts) == sorted(ids)
    # Between the read and the write, as requests on the database thread:
    assert api.post(f"/api/v1/jobs/{held}/hold").status_code == 200
    assert api.post(f"/api/v1/jobs/{cancelled}/cancel").status_code == 200
    ((node, _gpus),) = starts[drained_on].placement
    assert api.post(f"/api/v1/nodes/{node}/drain", params={"reason": "fan"}).status_code == 200
    done = state.db.call(scheduler._write, reading, decisions)

    assert done.result is not None
    assert done.result.started == [kept], done.result
    assert sorted(done.result.deferred) == sorted([held, cancelled, drained_on])
    states = {i: api.get(f"/api/v1/jobs/{i}").json()["state"] for i in ids}
    assert states == {
        held: "pending",
        cancelled: "cancelled",
        drained_on: "pending",
        kept: "assigned",
    }
