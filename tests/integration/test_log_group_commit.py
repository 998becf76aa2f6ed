"""Log batches of many runs stored in one transaction
(`agent_access.append_logs_many`, behind `POST /agent/jobs/{id}/logs`): a
batch refused (another node's run) is refused alone, and the others of
the same transaction are stored. Both databases."""

from __future__ import annotations

import time

from server_api import Api, app_state
from wire_agent import WireAgent

from schedulearn.protocol import LogBatch, LogLine
from schedulearn.server.errors import Forbidden
from schedulearn.server.services import agent_access, logs
from schedulearn.server.services.enrollment import AgentIdentity


def placed(api: Api, node: WireAgent) -> int:
    """A one-GPU job started on `node`."""
    node.register()
    r = api.post("/api/v1/jobs", json={"command": ["true"], "gpus": 1})
    assert r.status_code == 201, r.text
    job_id = int(r.json()["ids"][0])
    (start,) = node.work_until(lambda b: b.starts).starts
    assert start.job_id == job_id
    node.start(job_id, start.attempt)
    return job_id


def batch(node: str, text: str) -> LogBatch:
    return LogBatch(attempt=1, node=node, lines=[LogLine(seq=0, text=text, at=time.time())])


def texts(api: Api, job_id: int) -> list[str]:
    r = api.get(f"/api/v1/jobs/{job_id}/logs", params={"limit": 100})
    assert r.status_code == 200, r.text
    return [line["text"] for line in r.json()["lines"]]


def test_a_refused_batch_costs_the_others_of_its_transaction_nothing(api: Api) -> None:
    one, two = WireAgent(api, "n1", gpus=1), WireAgent(api, "n2", gpus=1)
    mine, theirs = placed(api, one), placed(api, two)
    n1, n2 = AgentIdentity("d1", "n1"), AgentIdentity("d2", "n2")
    sl = app_state(api.client)
    done = sl.db.call(
        agent_access.append_logs_many,
        [
            (n1, mine, batch("n1", "from n1")),
            (n1, theirs, batch("n1", "n1 writing n2's job")),
            (n2, theirs, batch("n2", "from n2")),
        ],
        sl.settings.log_stored_max_bytes,
    )
    assert isinstance(done[0], logs.Appended) and isinstance(done[2], logs.Appended), done
    assert isinstance(done[1], Forbidden), done
    assert texts(api, mine) == ["from n1"]
    assert texts(api, theirs) == ["from n2"]
