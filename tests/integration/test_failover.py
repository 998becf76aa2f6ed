"""Failover between server replicas (issue 14, item 8), with real processes.

Two `schedulearn server` processes share one PostgreSQL database (the
fixtures start it on the SQLite pass too). The CLI and an agent are given
a list of addresses whose first is a closed port; they go on to a live
replica. Then the replica they were using is killed (SIGKILL) and they go
on to the other one:

- the CLI's client submits through the list, and after the kill its next
  submission lands on the survivor; the `schedulearn` command itself takes
  the list in SCHEDULEARN_SERVER and in repeated `--server` options;
- the agent enrolls through the first live replica (its credential is kept
  in the shared database, so the other accepts it), runs a job, and after
  its replica is killed runs the next job too: it heartbeats, polls for work
  and reports through the survivor, which also takes the scheduler lock.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_server import Postgres

from schedulearn.cli.client import Client
from schedulearn.cli.freeports import free_port
from schedulearn.cli.localcluster import AgentProcess, ServerProcess
from schedulearn.protocol import JobSpec, JobState
from waiting import wait_until

pytestmark = pytest.mark.postgres

CLI = (sys.executable, "-m", "schedulearn.cli.main")
ADMIN = "failover-admin-token"
AGENT = "failover-agent-token"


@pytest.fixture
def replicas(postgres_server: Postgres, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    url = postgres_server.new_database()
    started: list[ServerProcess] = []
    try:
        for name in ("a", "b"):
            server = ServerProcess(url, tmp_path / f"server-{name}.log", ADMIN, AGENT)
            server.start()
            started.append(server)
            server.wait_serving()  # the client below does not wait for a loading app
        yield started
    finally:
        for server in started:
            server.kill()


def _closed() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_the_cli_fails_over_from_a_closed_port_and_then_from_a_killed_replica(
    replicas: list[ServerProcess],
) -> None:
    a, b = replicas
    servers = f"{_closed()},{a.url},{b.url}"
    with Client(servers, ADMIN, retry_seconds=0) as client:
        first = client.submit(JobSpec(command=["true"], gpus=0)).ids
        a.kill()
        second = client.submit(JobSpec(command=["true"], gpus=0)).ids
        listed = {job.id for job in client.jobs().items}
    assert set(first) | set(second) <= listed and first != second
    # The command itself, given the list with its dead entries first.
    dead = f"{_closed()},{a.url}"
    listed = _cli_job_ids(SCHEDULEARN_SERVER=f"{dead},{b.url}")
    assert listed >= set(first) | set(second)
    # The same list as repeated --server options (each may hold commas too).
    listed = _cli_job_ids("--server", _closed(), "--server", f"{a.url},{b.url}")
    assert listed >= set(first) | set(second)


def _cli_job_ids(*options: str, **env: str) -> set[int]:
    """The ids `schedulearn jobs --json OPTIONS` lists, run as its own process."""
    out = subprocess.run(
        [*CLI, "jobs", "--json", *options],
        env={"SCHEDULEARN_TOKEN": ADMIN, "PATH": "", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return {job["id"] for job in json.loads(out.stdout)["items"]}


def _finished(client: Client, job_id: int) -> JobState:
    return client.job(job_id).state


def test_an_agent_fails_over_to_the_surviving_replica(
    replicas: list[ServerProcess], tmp_path: Path
) -> None:
    a, b = replicas
    agent = AgentProcess(
        f"{_closed()},{a.url},{b.url}",
        "",
        "n1",
        1,
        tmp_path / "agent.log",
        tmp_path / "agent-state",
        join_token=a.join_token("n1"),
    )
    agent.start()
    try:
        with Client(f"{a.url},{b.url}", ADMIN) as client:
            job = client.submit(JobSpec(command=["true"], gpus=1)).ids[0]
            state = wait_until(
                lambda: _finished(client, job),
                120,
                f"job {job} to finish through replica a\n{agent.log()[-3000:]}",
                until=lambda s: s.is_final,
            )
            assert state is JobState.SUCCEEDED, agent.log()[-3000:]
            a.kill()
            later = client.submit(JobSpec(command=["true"], gpus=1)).ids[0]
            state = wait_until(
                lambda: _finished(client, later),
                120,
                f"job {later} to finish after replica a was killed\n{agent.log()[-3000:]}",
                until=lambda s: s.is_final,
            )
            assert state is JobState.SUCCEEDED, agent.log()[-3000:]
            node = next(n for n in client.nodes().items if n.name == "n1")
            assert node.healthy, node
        assert agent.alive, agent.log()[-3000:]
    finally:
        agent.kill()
