"""A real server process and agent processes on 127.0.0.1, driven over HTTP and
through the `schedulearn` CLI: the `Cluster` the end-to-end tests share."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from schedulearn.cli.client import Client
from schedulearn.cli.localcluster import AgentProcess, ServerProcess
from schedulearn.protocol import JobPublic
from waiting import Timeout, wait_until

ADMIN = "e2e-admin-token"
AGENT = "e2e-agent-token"
FINAL = {"succeeded", "failed", "cancelled", "timeout"}


class Cluster:
    def __init__(self, root: Path, server_env: dict[str, str] | None = None) -> None:
        self.root = root
        self.server = ServerProcess(
            f"sqlite:///{root / 'server.db'}",
            root / "server.log",
            ADMIN,
            AGENT,
            env={
                "SCHEDULEARN_HEARTBEAT_SECONDS": "0.5",
                # A lease of 3.75 s: 3.25 s past a heartbeat's send before it lapses.
                # With 3 (a 2.25 s lease) a loaded CI runner once stalled an agent
                # past its 1.75 s margin, and its runs were requeued mid-test.
                "SCHEDULEARN_NODE_TIMEOUT_SECONDS": "5",
                "SCHEDULEARN_STOP_GRACE_SECONDS": "2",
                **(server_env or {}),
            },
        )
        self.agents: dict[str, AgentProcess] = {}
        self.pids_to_reap: set[int] = set()

    def start(self) -> None:
        self.server.start()
        self.server.wait_ready()

    def restart_server(self) -> None:
        self.server.start()
        self.server.wait_ready()

    def add_agent(self, name: str, gpus: int = 4) -> AgentProcess:
        agent = AgentProcess(
            self.server.url,
            "",
            name,
            gpus,
            self.root / f"agent-{name}.log",
            self.root / f"state-{name}",
            # E2E_NODE: a job's output can say which node ran it.
            extra=["--workdir", str(self.root), "--stop-jobs-on-exit", "--env", f"E2E_NODE={name}"],
        )
        agent.enroll(self.server)  # each node its own credential
        agent.start()
        self.agents[name] = agent
        return agent

    def wait_nodes(self, n: int, timeout: float = 30.0) -> None:
        def healthy() -> list[str]:
            with self.client() as c:
                return [node.name for node in c.nodes().items if node.healthy]

        with self._logs_on_timeout():
            wait_until(healthy, timeout, f"{n} healthy nodes", until=lambda names: len(names) >= n)

    def client(self, token: str = ADMIN) -> Client:
        return Client(self.server.url, token)

    def cli(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "SCHEDULEARN_SERVER": self.server.url, "SCHEDULEARN_TOKEN": ADMIN}
        env["SCHEDULEARN_CONFIG"] = str(self.root / "cli.json")
        return subprocess.run(
            [sys.executable, "-m", "schedulearn.cli.main", *args],
            capture_output=True, text=True, env=env, timeout=kw.pop("timeout", 60), **kw,
        )  # fmt: skip

    def wait_final(self, ids: list[int], timeout: float = 120.0) -> dict[int, JobPublic]:
        done: dict[int, JobPublic] = {}

        def still_running() -> list[int]:
            for i in ids:
                if i not in done and (j := c.job(i)).state in FINAL:
                    done[i] = j
            return sorted(set(ids) - set(done))[:20]

        with self.client() as c, self._logs_on_timeout():
            wait_until(still_running, timeout, "the jobs to end", until=lambda left: not left)
        return done

    def wait_state(self, job_id: int, states: set[str], timeout: float = 30.0) -> JobPublic:
        with self.client() as c, self._logs_on_timeout():
            return wait_until(
                lambda: c.job(job_id),
                timeout,
                f"job {job_id} to be {sorted(states)}",
                until=lambda j: j.state in states,
            )

    def passes(self) -> int:
        """Scheduling passes the server has run (its Prometheus count)."""
        text = httpx.get(f"{self.server.url}/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith("schedulearn_scheduler_pass_seconds_count"):
                return int(float(line.split()[-1]))
        return 0

    def settle(self, timeout: float = 30.0) -> None:
        """Return once a whole scheduling pass has run that began after this call
        (two completed passes: the first may have begun before it)."""
        seen = self.passes()
        with self._logs_on_timeout():
            wait_until(
                self.passes,
                timeout,
                "a scheduling pass begun after the test's last change",
                until=lambda n: n >= seen + 2,
            )

    @contextlib.contextmanager
    def _logs_on_timeout(self) -> Iterator[None]:
        """A wait that times out says what the server and agents logged."""
        try:
            yield
        except Timeout as exc:
            raise Timeout(f"{exc}\n{self.logs()}") from None

    def log_text(self, job_id: int) -> str:
        with self.client() as c:
            lines: list[str] = []
            after = 0
            while True:
                page = c.logs(job_id, after)
                if not page.lines:
                    return "\n".join(lines)
                lines += [ln.text.rstrip("\n") for ln in page.lines]
                after = page.next_after

    def logs(self) -> str:
        parts = [f"--- server\n{self.server.log()[-4000:]}"]
        parts += [f"--- agent {n}\n{a.log()[-3000:]}" for n, a in self.agents.items()]
        return "\n".join(parts)

    def stop(self) -> None:
        for agent in self.agents.values():
            agent.stop(timeout=15)  # SIGTERM: it stops its jobs first
        self.server.kill()
        for pid in self.pids_to_reap:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)


@contextlib.contextmanager
def one_node(root: Path, gpus: int) -> Iterator[Cluster]:
    """A started cluster of one agent with `gpus` GPUs, stopped on exit (a
    module fixture's body: `with one_node(tmp_path_factory.mktemp(...), 2) as c`)."""
    c = Cluster(root)
    try:
        c.start()
        c.add_agent("a", gpus=gpus)
        c.wait_nodes(1)
        yield c
    finally:
        c.stop()


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """`result`, after checking the command succeeded (its output in the message if not)."""
    assert result.returncode == 0, f"rc {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def submitted_id(result: subprocess.CompletedProcess[str]) -> int:
    """The job (or array) id a successful `schedulearn submit` printed."""
    found = re.search(r"submitted jobs? (\d+)", result.stdout + result.stderr)
    assert found, result.stdout + result.stderr
    return int(found[1])
