"""Waiting work polls share one read a second (`server.workwatch`).

Work that another replica writes sets no wake-up on this one. Each poll
used to read its node's work again every second for that; now one read
a second for all of them finds the nodes with work (or a revoked
credential) and wakes only those polls. Played here on one app: its
scheduler loop is stopped, and a round run from the test's thread writes
an assignment as another replica's would, without waking anyone.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from server_api import Api, on_app_loop
from sqlalchemy import text
from wire_agent import WireAgent

from schedulearn.protocol import WorkBatch
from schedulearn.server.services import agent_access

LONG = 60.0  # a poll's wait: far longer than any of these tests waits for its answer


def poll_in_background(
    node: WireAgent, out: list[WorkBatch | int], wait: float = LONG
) -> threading.Thread:
    def poll() -> None:
        r = node.api.get(
            "/api/v1/agent/work", headers=node.headers, params={"node": node.name, "wait": wait}
        )
        out.append(WorkBatch.model_validate(r.json()) if r.status_code == 200 else r.status_code)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    return thread


def quiet_scheduler(api: Api) -> None:
    """No scheduling round runs but the test's own (which wakes no poll)."""
    on_app_loop(api.client, api.state.scheduler.stop)


def test_work_written_without_a_wake_up_reaches_the_waiting_poll(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    quiet_scheduler(api)
    r = api.post("/api/v1/jobs", json={"command": ["true"], "gpus": 1})
    assert r.status_code == 201, r.text
    job_id = r.json()["ids"][0]
    got: list[WorkBatch | int] = []
    with node.beating():
        poll = poll_in_background(node, got)
        poll.join(1.5)
        assert not got  # nothing for it yet: the poll waits
        # As another replica's scheduler would: written, and nobody here woken.
        api.state.scheduler.run_once_blocking()
        poll.join(20)
    assert got, f"the poll still waited for its {LONG:g} s deadline"
    [batch] = got
    assert isinstance(batch, WorkBatch)
    assert [a.job_id for a in batch.starts] == [job_id]


def test_a_credential_revoked_without_a_wake_up_ends_the_waiting_poll(api: Api) -> None:
    node = WireAgent(api, "n1", gpus=1)
    node.register()
    got: list[WorkBatch | int] = []
    poll = poll_in_background(node, got)
    poll.join(1.5)
    assert not got

    # `node rm` served by another replica: the credential revoked, nobody here woken.
    def revoke(session: Any) -> None:
        session.execute(text("UPDATE node_credential SET revoked_at = 1 WHERE node = 'n1'"))
        session.commit()

    api.state.db.call(revoke)
    poll.join(20)
    assert got == [401]


def test_waiting_polls_read_their_work_once_each_while_nothing_happens(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = [WireAgent(api, f"n{i}", gpus=1) for i in range(8)]
    for node in nodes:
        node.register()
    reads: list[str] = []
    real = agent_access.take_work

    def counted(session: Any, who: Any, node: str, now: float, timing: Any) -> WorkBatch:
        reads.append(node)
        return real(session, who, node, now, timing)

    monkeypatch.setattr(agent_access, "take_work", counted)
    watch = api.state.work_watch
    before = watch.reads
    got: list[WorkBatch | int] = []
    polls = [poll_in_background(node, got, wait=8.0) for node in nodes]
    for poll in polls:
        poll.join(4.0 / len(polls))
    # About four seconds of eight polls waiting: each read its work once, as it
    # began, and the watch read for all of them together about once a second.
    assert sorted(reads) == sorted(node.name for node in nodes)
    assert watch.reads > before
    assert not got
    for poll in polls:
        poll.join(20)  # each reads once more at its deadline, and answers
    assert len(got) == len(nodes)
