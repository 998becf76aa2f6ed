"""Per-node credentials against a real server process (issue 11, item 2).

Two nodes are enrolled as an admin would (`node add`, then the agent's join
exchange). With node A's credential, every agent call about node B or about
a job placed on B is refused with 403 and changes nothing; the same calls
with B's own credential go through (so each refusal is the rule at work,
not a broken request). `node rm` revokes; join tokens work once; an
old-style agent token is bound to the first node it registers.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx
from agent_support import ADMIN_TOKEN, AdminApi, ServerProc, join_token

from schedulearn.protocol import (
    EventKind,
    GpuInfo,
    JobEvent,
    JobEventReport,
    LogBatch,
    LogLine,
    NodeRegistration,
    ProgressBatch,
    ProgressReport,
    WorkBatch,
)
from waiting import wait_until

AGENT = "/api/v1/agent"


class Node:
    """One enrolled node speaking the agent protocol by hand over real HTTP."""

    def __init__(self, server: ServerProc, name: str, credential: str | None = None) -> None:
        self.name = name
        if credential is None:
            joined = httpx.post(
                f"{server.url}{AGENT}/join", json={"join_token": join_token(server.url, name)}
            )
            assert joined.status_code == 200, joined.text
            assert joined.json()["node"] == name
            credential = str(joined.json()["credential"])
        self.credential = credential
        self.http = httpx.Client(
            base_url=server.url + AGENT,
            headers={"Authorization": f"Bearer {credential}"},
            timeout=15.0,
        )

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        if body is not None:
            kw["content"] = body.model_dump_json()
            kw["headers"] = {"Content-Type": "application/json", **kw.get("headers", {})}
        return self.http.request(method, path, **kw)

    def register(self, name: str | None = None) -> httpx.Response:
        reg = NodeRegistration(name=name or self.name, gpus=[GpuInfo(index=0)])
        return self.call("POST", "/register", reg)

    def work(self, node: str | None = None) -> httpx.Response:
        return self.call("GET", "/work", params={"node": node or self.name, "wait": "1"})

    def start_one(self, api: AdminApi) -> tuple[int, int]:
        """Submit a one-GPU job, take it (this node is the only one with a free GPU), start it."""
        job_id = api.submit(command="sleep 1000", gpus=1, preemptible=True)

        def taken() -> WorkBatch | None:
            r = self.work()
            assert r.status_code == 200, r.text
            batch = WorkBatch.model_validate_json(r.content)
            return batch if batch.starts else None

        attempt = wait_until(taken, 20, f"job {job_id} on {self.name}").starts[0].attempt
        started = JobEvent(attempt=attempt, node=self.name, kind=EventKind.STARTED, at=time.time())
        assert self.call("POST", f"/jobs/{job_id}/events", started).status_code == 200
        return job_id, attempt


def _tar(data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("checkpoint.pkl")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _put_checkpoint(
    who: Node, job_id: int, attempt: int, body: bytes, node: str = ""
) -> httpx.Response:
    return who.http.put(
        f"/jobs/{job_id}/checkpoint",
        params={"attempt": str(attempt), "node": node},
        headers={"X-Checkpoint-Sha256": hashlib.sha256(body).hexdigest()},
        content=body,
    )


def _forbidden(r: httpx.Response) -> str:
    assert r.status_code == 403, (r.status_code, r.text)
    return str(r.json()["error"])


def test_a_node_cannot_act_for_another_node_or_its_jobs(
    server: ServerProc, api: AdminApi, tmp_path: Path
) -> None:
    a, b = Node(server, "node-a"), Node(server, "node-b")
    assert b.register().status_code == 200
    job_id, attempt = b.start_one(api)
    # B checkpoints its job legitimately, so there is something to steal.
    mine = _tar(b"alice's weights")
    assert _put_checkpoint(b, job_id, attempt, mine).status_code == 200
    assert a.register().status_code == 200
    before = api.job(job_id)
    assert before["state"] == "running" and before["checkpoint"]["attempt"] == attempt

    # Events: single, batch, with B's node name, with A's, with none.
    for node in ("", "node-b", "node-a"):
        forged = JobEvent(
            attempt=attempt, node=node, kind=EventKind.EXITED, exit_code=0, at=time.time()
        )
        _forbidden(a.call("POST", f"/jobs/{job_id}/events", forged))
        batch = {"events": [{**forged.model_dump(mode="json"), "job_id": job_id}]}
        _forbidden(a.http.post("/events", json=batch))
    # A batch that mixes one of A's own events with a forged one is refused whole.
    own_id, own_attempt = a.start_one(api)
    mixed = [
        JobEventReport(
            job_id=j, attempt=n, node="", kind=EventKind.EXITED, exit_code=0, at=time.time()
        ).model_dump(mode="json")
        for j, n in ((own_id, own_attempt), (job_id, attempt))
    ]
    assert "nothing in this batch" in _forbidden(a.http.post("/events", json={"events": mixed}))
    assert api.job(own_id)["state"] == "running"
    # Logs and progress.
    lines = LogBatch(
        attempt=attempt, node="", lines=[LogLine(seq=1, text="forged\n", at=time.time())]
    )
    _forbidden(a.call("POST", f"/jobs/{job_id}/logs", lines))
    report = ProgressBatch(attempt=attempt, reports=[ProgressReport(at=time.time(), epoch=9)])
    _forbidden(a.call("POST", f"/jobs/{job_id}/progress", report))
    # Checkpoints: neither downloaded nor overwritten.
    _forbidden(a.http.get(f"/jobs/{job_id}/checkpoint"))
    _forbidden(_put_checkpoint(a, job_id, attempt, _tar(b"poison")))
    _forbidden(_put_checkpoint(a, job_id, attempt, _tar(b"poison"), node="node-b"))
    # B's node name: its work, heartbeat and registration.
    assert "node-b" in _forbidden(a.work("node-b"))
    _forbidden(a.http.post("/heartbeat", json={"name": "node-b"}))
    _forbidden(a.register("node-b"))

    # Nothing changed: state, logs, progress, checkpoint, and B still gets its work.
    after = api.job(job_id)
    for field in ("state", "exit_code", "attempt", "progress", "checkpoint", "placement"):
        assert after[field] == before[field], field
    assert api.texts(job_id) == []
    got = b.http.get(f"/jobs/{job_id}/checkpoint")
    assert got.status_code == 200 and got.content == mine
    api.cancel(job_id)
    stops = wait_until(
        lambda: WorkBatch.model_validate_json(b.work().content).stops, 20, "B's stop order"
    )
    assert [s.job_id for s in stops] == [job_id]
    # The same calls with B's own credential go through.
    real = LogBatch(attempt=attempt, lines=[LogLine(seq=1, text="real\n", at=time.time())])
    assert b.call("POST", f"/jobs/{job_id}/logs", real).status_code == 200
    assert api.texts(job_id) == ["real\n"]
    exited = JobEvent(attempt=attempt, kind=EventKind.EXITED, exit_code=143, at=time.time())
    assert b.call("POST", f"/jobs/{job_id}/events", exited).status_code == 200
    assert api.job(job_id)["state"] == "cancelled"


def test_user_and_admin_tokens_cannot_act_as_a_node(server: ServerProc, api: AdminApi) -> None:
    user = api.http.post("/tokens", json={"user": "bob", "role": "user"}).json()["token"]
    for token in (user, ADMIN_TOKEN):
        node = Node(server, "n1", credential=token)
        assert "node agents" in _forbidden(node.register())
        assert "node agents" in _forbidden(node.work())
    unknown = Node(server, "n1", credential="not-a-credential").register()
    assert unknown.status_code == 401 and "node add" in unknown.json()["error"]


def test_a_join_token_works_once(server: ServerProc) -> None:
    token = join_token(server.url, "n1")
    first = httpx.post(f"{server.url}{AGENT}/join", json={"join_token": token})
    assert first.status_code == 200, first.text
    again = httpx.post(f"{server.url}{AGENT}/join", json={"join_token": token})
    assert again.status_code == 401
    assert "already used" in again.json()["error"] and "node add n1" in again.json()["error"]
    # The credential the first exchange gave still works.
    assert Node(server, "n1", credential=first.json()["credential"]).register().status_code == 200


def test_node_rm_revokes_and_requeues(server: ServerProc, api: AdminApi) -> None:
    b = Node(server, "node-b")
    assert b.register().status_code == 200
    job_id, _ = b.start_one(api)
    removed = api.http.delete("/nodes/node-b")
    assert removed.status_code == 200, removed.text
    assert removed.json() == {"name": "node-b", "lost_jobs": [job_id]}
    refused = b.http.post("/heartbeat", json={"name": "node-b"})
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]
    assert b.register().status_code == 401
    assert api.node("node-b") is None
    assert api.job(job_id)["state"] in ("pending", "lost")
    assert api.http.delete("/nodes/node-b").status_code == 200  # revoked rows remain
    assert api.http.delete("/nodes/never-was").status_code == 404


def test_an_old_style_agent_token_is_bound_to_the_first_node_it_registers(
    server: ServerProc, api: AdminApi
) -> None:
    made = api.http.post("/tokens", json={"user": "old-agent", "role": "agent"})
    old = Node(server, "old1", credential=made.json()["token"])
    # Not bound yet: only a registration binds it.
    assert "not bound" in _forbidden(old.work())
    assert old.register().status_code == 200
    assert old.work().status_code == 200
    assert "'old1'" in _forbidden(old.register("other"))
    _forbidden(old.http.post("/heartbeat", json={"name": "other"}))
    # Another unbound token cannot claim a node that has its own credential.
    Node(server, "enrolled")
    second = api.http.post("/tokens", json={"user": "old-agent", "role": "agent"})
    claim = Node(server, "enrolled", credential=second.json()["token"]).register()
    assert "enrolled with its own credential" in _forbidden(claim)


def test_a_real_agent_joins_keeps_its_credential_0600_and_stops_when_removed(
    server: ServerProc, api: AdminApi, start_agent: Any, tmp_path: Path
) -> None:
    agent = start_agent("n1", gpus=1)
    wait_until(lambda: api.node("n1"), 30, "n1 to register")
    stored = agent.state_dir / "credential.json"
    assert stored.stat().st_mode & 0o777 == 0o600
    secret = stored.read_text()
    join = agent.env["SCHEDULEARN_JOIN_TOKEN"]
    # Never on the agent's command line.
    argv = Path(f"/proc/{agent.popen.pid}/cmdline").read_bytes()
    assert join.encode() not in argv
    assert b"--token" not in argv
    # Restarted with the same (spent) join token, it uses the stored credential.
    agent.stop()
    agent.start()
    wait_until(
        lambda: agent.log().count("enrolled with this join token already") == 1,
        30,
        "the restarted agent to use its stored credential",
    )
    assert stored.read_text() == secret
    job_id = api.submit(command="echo hi", gpus=1)
    assert api.wait_state(job_id, {"succeeded"}, timeout=60)["state"] == "succeeded"
    # `node rm` from the CLI: the agent's next call is refused and it stops, saying why.
    rm = subprocess.run(
        [sys.executable, "-m", "schedulearn.cli.main", "node", "rm", "n1"],
        env={
            "SCHEDULEARN_SERVER": server.url,
            "SCHEDULEARN_TOKEN": ADMIN_TOKEN,
            "SCHEDULEARN_CONFIG": str(tmp_path / "cli.json"),
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rm.returncode == 0, rm.stderr
    assert "credential is revoked" in rm.stderr
    assert agent.popen.wait(30) == 2
    assert "refused this node's credential (HTTP 401" in agent.log()
    assert "revoked" in agent.log()
