"""At most one live copy of a job (issue 14): real server, agents and jobs on 127.0.0.1.

Each job here appends what it does to a file of its own copy's lines
(`start PID T`, `beat PID T` every 50 ms, `end PID T` on SIGTERM), so the
test can tell its copies apart by pid and check from their timestamps that
no two ran at once. The server runs with a short node timeout (and a
lease under it), so losses come quickly.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from agent_support import AdminApi, AgentProc, ServerProc, StartAgent, pid_alive
from live_support import messages

from schedulearn.agent import credential
from schedulearn.agent.leaseguard import LOG_FILE
from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from waiting import wait_until

NODE_TIMEOUT = 5.0  # lease 3.75 s, grace 0.75 s by default (settings.lease_timing)

JOB = """\
import os, signal, sys, time
out = sys.argv[1]
def note(what):
    with open(out, "a") as f:
        f.write(f"{what} {os.getpid()} {time.time():.6f}\\n")
def stop(*_):
    note("end")
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
note("start")
end = time.time() + float(sys.argv[2])
while time.time() < end:
    note("beat")
    time.sleep(0.05)
note("end")
"""


@pytest.fixture
def job_script(tmp_path: Path) -> Path:
    script = tmp_path / "copies.py"
    script.write_text(JOB)
    return script


def copies(path: Path) -> dict[int, tuple[float, float]]:
    """Each copy's (first, last) timestamp, by pid."""
    spans: dict[int, tuple[float, float]] = {}
    if not path.exists():
        return spans
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue  # a line being written
        pid, at = int(parts[1]), float(parts[2])
        first, last = spans.get(pid, (at, at))
        spans[pid] = (min(first, at), max(last, at))
    return spans


def overlapping(spans: dict[int, tuple[float, float]]) -> list[tuple[int, int]]:
    ordered = sorted(spans.items(), key=lambda item: item[1][0])
    found = []
    for (pid_a, (_, end_a)), (pid_b, (start_b, _)) in itertools.pairwise(ordered):
        if end_a >= start_b:
            found.append((pid_a, pid_b))
    return found


def registered(api: AdminApi, name: str) -> None:
    wait_until(
        lambda: api.node(name), 30, f"node {name} to register", until=lambda n: n and n["healthy"]
    )


def guard_log(agent: AgentProc) -> str:
    path = agent.state_dir / LOG_FILE
    return path.read_text() if path.exists() else ""


def agent_post(agent: AgentProc, server: ServerProc, path: str, body: object) -> httpx.Response:
    stored = credential.load(agent.state_dir)
    assert stored is not None
    return httpx.post(
        f"{server.url}/api/v1/agent{path}",
        json=body,
        headers={
            "Authorization": f"Bearer {stored.credential}",
            PROTOCOL_HEADER: str(PROTOCOL_VERSION),
        },
        timeout=10,
    )


@pytest.fixture
def one_job(job_script: Path, tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    out = tmp_path / "copies.log"
    yield out, [sys.executable, str(job_script), str(out), "600"]


@pytest.mark.parametrize("server", [{"node_timeout": NODE_TIMEOUT}], indirect=True)
def test_a_frozen_agent_leaves_no_overlapping_copy_and_its_thawed_reports_are_refused(
    api: AdminApi,
    server: ServerProc,
    start_agent: StartAgent,
    one_job: tuple[Path, list[str]],
) -> None:
    out, command = one_job
    old = start_agent("n1", gpus=1)
    registered(api, "n1")
    job_id = api.submit(command=command, gpus=1)
    api.wait_state(job_id, {"running"})
    (first_pid,) = wait_until(lambda: copies(out), 20, "the first copy to start")
    start_agent("n2", gpus=1)
    registered(api, "n2")

    assert old.popen is not None
    old.popen.send_signal(signal.SIGSTOP)  # frozen: no heartbeat, no lease renewal
    try:
        job = wait_until(
            lambda: api.job(job_id),
            60,
            "the job to run again on n2",
            until=lambda j: j["state"] == "running" and j["attempt"] >= 2,
        )
        assert job["placement"] == {"n2": [0]}
        spans = wait_until(lambda: copies(out), 20, "the second copy", until=lambda s: len(s) == 2)
        # The lease's guard stopped the first copy (SIGTERM: it wrote its end line)
        # before the server ran the job again.
        assert not pid_alive(first_pid)
        assert "lease lapsed: SIGTERM to job" in guard_log(old)
        assert overlapping(spans) == [], spans
    finally:
        old.popen.send_signal(signal.SIGCONT)

    # Thawed, the old agent learns its lease lapsed, registers again and starts nothing.
    wait_until(lambda: "lease lapsed" in old.log(), 30, "the thawed agent to see its lapse")
    registered(api, "n1")
    wait_until(
        lambda: "registered again after the lease lapsed" in old.log(),
        30,
        "the thawed agent to register again",
    )
    # Whatever it still says about attempt 1 is refused and changes nothing.
    event = {"attempt": 1, "kind": "exited", "exit_code": 0, "at": 0.0}
    refused = agent_post(old, server, f"/jobs/{job_id}/events", event)
    assert refused.status_code == 409, refused.text
    assert "attempt 1" in refused.text and f"attempt {job['attempt']}" in refused.text
    batch = agent_post(old, server, "/events", {"events": [{**event, "job_id": job_id}]})
    assert batch.status_code == 200 and batch.json()["acks"] == [
        {"ok": True, "ignored": True, "full_log_wanted": False}
    ]
    logs = {"attempt": 1, "lines": [{"seq": 10_000, "text": "stale", "at": 0.0}]}
    assert agent_post(old, server, f"/jobs/{job_id}/logs", logs).status_code == 409
    after = api.job(job_id)
    assert (after["state"], after["attempt"]) == ("running", job["attempt"])
    assert "stale" not in api.texts(job_id)
    spans = copies(out)
    assert len(spans) == 2 and overlapping(spans) == [], spans
    assert [pid for pid in spans if pid_alive(pid)] == [p for p in spans if p != first_pid]


@pytest.mark.parametrize("server", [{"node_timeout": NODE_TIMEOUT}], indirect=True)
def test_a_job_whose_agent_was_killed_is_stopped_when_the_lease_lapses(
    api: AdminApi, start_agent: StartAgent, one_job: tuple[Path, list[str]]
) -> None:
    out, command = one_job
    agent = start_agent("n1", gpus=1)
    registered(api, "n1")
    job_id = api.submit(command=command, gpus=1)
    api.wait_state(job_id, {"running"})
    (pid,) = wait_until(lambda: copies(out), 20, "the job to start")
    agent.kill()  # nobody renews the lease now; the job must not run on forever
    wait_until(lambda: not pid_alive(pid), 30, "the lease's guard to stop the orphan")
    assert f"end {pid}" in out.read_text()  # SIGTERM first: it could save
    assert "lease lapsed: SIGTERM to job" in guard_log(agent)
    # The server requeues it as a node loss, not the job's failure.
    told = wait_until(
        lambda: messages(api, job_id), 30, "the job's requeue", until=lambda m: "requeued" in m
    )
    assert "its node went down" in told and "not counted against max_restarts" in told
    assert api.job(job_id)["restarts"] == 0


@dataclass
class EndedUnwatched:
    """A job that ended (exit 7) while its node's agent was killed."""

    api: AdminApi
    job_id: int
    killed: AgentProc
    start_agent: Callable[[], AgentProc]  # node n1's agent again, on the same state


@contextlib.contextmanager
def ended_while_the_agent_was_killed(
    server: ServerProc, tmp_path: Path
) -> Iterator[EndedUnwatched]:
    """Starts `server` and node n1's agent, runs a job that waits for a gate,
    kills the agent, then opens the gate: the job ends while no agent watches
    it. Everything started is killed at the end."""
    server.start_ready()
    api = AdminApi(server.url)
    gate = tmp_path / "gate"
    agents: list[AgentProc] = []

    def agent() -> AgentProc:
        proc = AgentProc(server.url, "n1", tmp_path / "state-n1", tmp_path / "agent-n1.log", gpus=1)
        proc.start()
        agents.append(proc)
        return proc

    try:
        first = agent()
        registered(api, "n1")
        job_id = api.submit(
            command=f"echo up; while [ ! -e {gate} ]; do sleep 0.05; done; echo done; exit 7",
            gpus=1,
        )
        api.wait_state(job_id, {"running"})
        wait_until(lambda: "up" in api.texts(job_id), 20, "the first line")
        first.kill()
        gate.touch()
        yield EndedUnwatched(api, job_id, first, agent)
    finally:
        api.close()
        for proc in agents:
            proc.kill()
        server.kill()


def test_an_exit_while_the_agent_was_down_past_its_lease_is_honoured(
    agent_database_url: str, tmp_path: Path
) -> None:
    """Killed agent, the job ends on its own, the lease lapses, the agent comes back
    within the node timeout: the exit is the job's, recorded, and it is not run again."""
    server = ServerProc(agent_database_url, tmp_path / "server.log", node_timeout=30.0)
    server.env["SCHEDULEARN_LEASE_SECONDS"] = "2"
    server.env["SCHEDULEARN_LEASE_GRACE_SECONDS"] = "1"
    with ended_while_the_agent_was_killed(server, tmp_path) as run:
        api, job_id = run.api, run.job_id
        wait_until(
            lambda: "lease lapsed with no run left to stop" in guard_log(run.killed),
            30,
            "the lease to lapse with nothing left to stop",
        )
        again = run.start_agent()
        job = api.wait_state(job_id, {"succeeded", "failed", "pending", "lost"}, timeout=40)
        assert (job["state"], job["exit_code"], job["attempt"]) == ("failed", 7, 1)
        assert "requeued" not in messages(api, job_id)
        assert "SIGTERM" not in guard_log(run.killed)
        assert "re-adopted job" in again.log()


@pytest.mark.parametrize("server", [{"node_timeout": NODE_TIMEOUT}], indirect=True)
def test_an_agent_cut_off_from_the_server_stops_its_job_as_a_node_loss(
    api: AdminApi,
    server: ServerProc,
    start_agent: StartAgent,
    one_job: tuple[Path, list[str]],
) -> None:
    """The agent lives, but nothing it sends is answered (the server is frozen): it
    stops its job when the lease lapses, and the server hears of it as a lost node,
    not as the job exiting with SIGTERM's code."""
    out, command = one_job
    agent = start_agent("n1", gpus=1)
    registered(api, "n1")
    job_id = api.submit(command=command, gpus=1, max_restarts=0)
    api.wait_state(job_id, {"running"})
    (pid,) = wait_until(lambda: copies(out), 20, "the job to start")
    assert server.popen is not None
    server.popen.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: "lease lapsed" in agent.log(), 30, "the agent to see its lapse")
        wait_until(lambda: not pid_alive(pid), 30, "the job to be stopped")
    finally:
        server.popen.send_signal(signal.SIGCONT)
    wait_until(lambda: "registered again after the lease lapsed" in agent.log(), 30, "it")
    job = wait_until(
        lambda: api.job(job_id),
        30,
        "the job to run again",
        until=lambda j: j["state"] == "running" and j["attempt"] >= 2,
    )
    # max_restarts=0, and yet it runs again: a node loss is not the job's failure.
    assert job["restarts"] == 0 and job["exit_code"] is None
    assert "its node went down" in messages(api, job_id)
    # "running" is the server's word: the second copy may not have written
    # its first line yet on a busy machine.
    spans = wait_until(lambda: copies(out), 20, "the second copy", until=lambda s: len(s) == 2)
    assert overlapping(spans) == [], spans


def test_an_exit_while_the_agent_was_down_past_the_node_timeout_stands(
    agent_database_url: str, tmp_path: Path
) -> None:
    """The same, but the agent comes back after the server wrote the job off and
    requeued it (no other node has run it yet): the agent reports the exit, and
    the job ends with it instead of running a second time."""
    # A longer node timeout than the others' (so a lease of 6 s): the job must end
    # on its own before the killed agent's lease lapses, and on a loaded machine
    # (CI) 3.75 s after the last renewal was once too little (the guard stopped
    # it, so there was no exit of its own to report, and it ran again).
    server = ServerProc(agent_database_url, tmp_path / "server.log", node_timeout=8.0)
    with ended_while_the_agent_was_killed(server, tmp_path) as run:
        api, job_id = run.api, run.job_id
        told = wait_until(
            lambda: messages(api, job_id), 60, "the requeue", until=lambda m: "requeued" in m
        )
        assert api.job(job_id)["state"] == "pending", told
        guarded = guard_log(run.killed)
        assert "SIGTERM" not in guarded, f"the lease lapsed before the job ended:\n{guarded}"
        again = run.start_agent()
        job = api.wait_state(job_id, {"succeeded", "failed"}, timeout=60)
        told = messages(api, job_id)
        why = f"{job}\n{told}\nagent:\n{again.log()[-3000:]}"
        assert (job["exit_code"], job["attempt"]) == (7, 1), why
        assert "the exit stands" in told, why
