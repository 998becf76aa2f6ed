"""A real server process and agent processes on 127.0.0.1, driven over HTTP and
through the `schedulearn` CLI: the `Cluster` the end-to-end tests share."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from schedulearn.cli.client import Client
from schedulearn.cli.localcluster import AgentProcess, ServerProcess
from schedulearn.protocol import JobPublic

ADMIN = "e2e-admin-token"
AGENT = "e2e-agent-token"
FINAL = {"succeeded", "failed", "cancelled"}


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
                "SCHEDULEARN_NODE_TIMEOUT_SECONDS": "3",
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
            extra=["--workdir", str(self.root), "--stop-jobs-on-exit"],
        )
        agent.enroll(self.server)  # each node its own credential
        agent.start()
        self.agents[name] = agent
        return agent

    def wait_nodes(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.client() as c:
                if sum(1 for node in c.nodes().items if node.healthy) >= n:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"{n} nodes did not join:\n{self.logs()}")

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
        deadline = time.time() + timeout
        done: dict[int, JobPublic] = {}
        with self.client() as c:
            while time.time() < deadline:
                for i in ids:
                    if i not in done:
                        j = c.job(i)
                        if j.state in FINAL:
                            done[i] = j
                if len(done) == len(ids):
                    return done
                time.sleep(0.2)
        missing = sorted(set(ids) - set(done))
        raise TimeoutError(f"jobs {missing[:20]} did not end:\n{self.logs()}")

    def wait_state(self, job_id: int, states: set[str], timeout: float = 30.0) -> JobPublic:
        deadline = time.time() + timeout
        with self.client() as c:
            while time.time() < deadline:
                j = c.job(job_id)
                if j.state in states:
                    return j
                time.sleep(0.1)
        raise TimeoutError(f"job {job_id} is {j.state}, not {states}: {j.message}\n{self.logs()}")

    def log_text(self, job_id: int) -> str:
        with self.client() as c:
            lines, after = [], 0
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
