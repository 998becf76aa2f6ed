"""A pass whose snapshot reads straddle a job's end is not refused by the
ledger (issue 36: "policy pass refused by the ledger" on PostgreSQL under
load).

On PostgreSQL every read of a pass sees what was committed when that read
began. A job that ended between the read of the running jobs and the
read of the GPUs' holders was running for the ledger (which held its
GPUs) and gone from the nodes the policy saw (its GPUs free): the
policy's start there was refused. Here the other writer is a real exit
report, recorded through the server's own service on a connection of its
own (another replica's, or a thread's on PostgreSQL), committed exactly
between those two reads. SQLite's driver reads outside a transaction
too, so on both backends the pass must start the waiting job on the GPU
the ended job freed, with no decision refused.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from server_api import Api, on_app_loop
from wire_agent import WireAgent

from schedulearn.core import registry
from schedulearn.protocol import EventKind, JobEventReport
from schedulearn.server.db import Database
from schedulearn.server.services import agents, scheduling, snapshot


def test_a_job_ending_between_the_snapshot_reads_leaves_the_pass_whole(
    api: Api, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = WireAgent(api, "n1", gpus=2)
    node.register()
    r = api.post("/api/v1/jobs", json={"command": ["true"], "gpus": 1})
    assert r.status_code == 201, r.text
    ending = int(r.json()["ids"][0])
    (start,) = node.work_until(lambda b: b.starts).starts
    node.start(ending, start.attempt)
    on_app_loop(api.client, api.state.scheduler.stop)  # the test runs the pass
    # It needs both GPUs: one is free, so a pass looks (`snapshot.could_change`).
    r = api.post("/api/v1/jobs", json={"command": ["true"], "gpus": 2})
    assert r.status_code == 201, r.text
    waiting = int(r.json()["ids"][0])

    writer = Database(database_url)  # another connection: another writer
    real_load_nodes = snapshot.load_nodes

    def exit_between_reads(*args: Any, **kw: Any) -> Any:
        report = JobEventReport(
            job_id=ending, attempt=start.attempt, node="n1", kind=EventKind.EXITED,
            exit_code=0, at=time.time(), on_its_own=True,
        )  # fmt: skip
        writer.call(agents.record_events, [report], time.time())
        return real_load_nodes(*args, **kw)

    monkeypatch.setattr(snapshot, "load_nodes", exit_between_reads)
    try:
        result = api.state.db.call(scheduling.run_pass, registry.create("fifo"), time.time(), None)
    finally:
        writer.close()
    assert result.skipped == [], result
    assert result.started == [waiting], result  # both GPUs, the freed one too
