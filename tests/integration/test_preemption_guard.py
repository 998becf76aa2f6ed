"""Defence in depth: whatever a policy asks, the server never preempts,
moves or resizes a job that is not marked preemptible."""

from __future__ import annotations

import gc
from typing import ClassVar

from server_api import Api
from stepped import stepped_app
from wire_agent import WireAgent

from schedulearn.core import ClusterView, Decision, Placement, Preempt, Resize
from schedulearn.core.policy import QueueOrder, arrival_order
from schedulearn.server import db
from schedulearn.server.models import Job
from schedulearn.server.services import scheduling
from schedulearn.settings import ServerSettings


class Rogue:
    """A broken policy: preempts and resizes every running job."""

    name: ClassVar[str] = "rogue"
    tick_seconds: ClassVar[float | None] = 1.0

    def order(self, view: ClusterView) -> QueueOrder:
        return arrival_order(view, "in arrival order")

    def decide(self, view: ClusterView) -> list[Decision]:
        out: list[Decision] = []
        for job in view.running:
            out.append(Preempt(job.id))
            out.append(Resize(job.id, Placement.single("n1", [0, 1])))
        return out


def test_a_rogue_policy_cannot_touch_a_job_not_preemptible(api: Api, database_url: str) -> None:
    node = WireAgent(api, "n1", gpus=2)
    node.register()
    r = api.post("/api/v1/jobs", json={"command": "train", "gpus": 1})
    job_id = r.json()["ids"][0]
    start = node.work_until(lambda b: b.starts).starts[0]
    node.start(job_id, start.attempt)
    database = db.Database(database_url)
    try:
        with database.session() as session:
            result = scheduling.run_pass(session, Rogue(), 1e12)
        # Past the ledger too: the writers themselves check the row.
        with database.session() as session:
            row = session.get(Job, job_id)
            assert row is not None
            direct = scheduling.PassResult()
            scheduling.resize(session, row, Placement.single("n1", [1]), 1e12, direct, {})
            scheduling._preempt(session, row, 1e12, direct)
            session.commit()
        assert len(direct.skipped) == 2 and direct.resized == direct.preempted == []
    finally:
        database.close()
    assert result.preempted == [] and result.resized == []
    assert any("not preemptible" in why for why in result.skipped), result.skipped
    shown = api.get(f"/api/v1/jobs/{job_id}").json()
    assert shown["state"] == "running" and shown["attempt"] == start.attempt
    assert node.work(wait=0.2).stops == []


class Watcher:
    """Decides nothing; notes whether the garbage collector was on meanwhile."""

    name: ClassVar[str] = "watcher"
    tick_seconds: ClassVar[float | None] = 1.0

    def __init__(self) -> None:
        self.collector_on: list[bool] = []

    def order(self, view: ClusterView) -> QueueOrder:
        return arrival_order(view, "in arrival order")

    def decide(self, view: ClusterView) -> list[Decision]:
        self.collector_on.append(gc.isenabled())
        return []


def test_a_pass_decides_with_the_collector_held_off(
    settings: ServerSettings, database_url: str
) -> None:
    # Its collections come after the pass, not in bursts inside it (schedulearn.collector).
    # The app's own scheduler loop is stopped (`stepped_app`): a pass of its own
    # holds the collector process-wide, and would race the checks below.
    with stepped_app(settings) as app:
        WireAgent(app.api, "n1", gpus=2).register()
        app.submit(gpus=1)
        database = db.Database(database_url)
        watcher = Watcher()
        try:
            assert gc.isenabled()
            with database.session() as session:
                scheduling.run_pass(session, watcher, 1e12)
        finally:
            database.close()
        assert watcher.collector_on == [False]
        assert gc.isenabled()
