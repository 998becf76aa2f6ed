"""A cluster of real processes on 127.0.0.1: one server and N agents.

Owns the child processes and their logs. Used by the end-to-end tests,
the crash tests and `bench/api_load.py`, which all need a server and
agents as separate processes (so they can be killed with SIGKILL), and
speak to them only over HTTP like any user would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from schedulearn.cli.freeports import free_port


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Ctrl-C ignored inside (from the main thread): wrap a cluster's clean-up in it.

    `uv run` passes the terminal's Ctrl-C on to the script it runs, so a
    script gets it twice: the second interrupted the clean-up the first
    began, and left servers and agents running (in sessions of their own,
    which no Ctrl-C reaches).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "schedulearn.cli.main", *args]


@dataclass
class Proc:
    """A child process with its log file; `kill` is SIGKILL, `stop` is SIGTERM."""

    args: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.popen = self.spawn(
            self.args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()

    def spawn(self, args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        """Start the process (`subprocess.Popen`). The test suite replaces this to
        fork servers and agents from a parent that has imported them already
        (tests/warm_parent.py); nothing else does."""
        return subprocess.Popen(args, **kw)

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash would: no clean-up runs."""
        if self.popen is not None and self.alive:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait()

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.popen is None:
            return None
        if self.alive:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""


class ServerProcess(Proc):
    def __init__(
        self,
        database_url: str,
        log_path: Path,
        admin_token: str,
        agent_token: str,
        port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_token = admin_token
        self.agent_token = agent_token
        args = _cli("server", "--host", "127.0.0.1", "--port", str(self.port))
        args += ["--database-url", database_url]
        super().__init__(
            args,
            log_path,
            {
                "SCHEDULEARN_ADMIN_TOKEN": admin_token,
                "SCHEDULEARN_AGENT_TOKEN": agent_token,
                "SCHEDULEARN_LOG_LEVEL": "warning",
                **(env or {}),
            },
        )

    def join_token(self, node: str) -> str:
        """Enroll `node` as the admin (`schedulearn node add`): its one-time join token."""
        r = httpx.post(
            f"{self.url}/api/v1/nodes",
            json={"name": node},
            headers={"Authorization": f"Bearer {self.admin_token}"},
            # The first request after start waits for the app to load (the server
            # listens before that): seconds on a loaded machine.
            timeout=60,
        )
        r.raise_for_status()
        return str(r.json()["join_token"])

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the server listens (`/healthz`): its app may still be loading."""
        self._wait_for("/healthz", timeout)

    def wait_serving(self, timeout: float = 120.0) -> None:
        """Until the app has loaded and serves (`/readyz`): while it loads, a
        request asking not to wait (`Prefer: wait=...` past its patience) gets
        503. Loading takes seconds on a busy machine, hence the long default."""
        self._wait_for("/readyz", timeout)

    def _wait_for(self, path: str, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not self.alive:
                raise RuntimeError(f"server exited early:\n{self.log()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}{path}", timeout=1).status_code == 200:
                    return
            time.sleep(0.05)
        raise TimeoutError(f"server not {path[1:]} in {timeout}s:\n{self.log()[-3000:]}")


class AgentProcess(Proc):
    """`python -m schedulearn.agent` with virtual GPUs.

    Give it a `join_token` (`ServerProcess.join_token`) to enroll as its own
    node (passed in the environment, never on argv); a `token` is passed
    with `--token`, as agents of earlier releases take it.
    """

    def __init__(
        self,
        server_url: str,
        token: str,
        name: str,
        gpus: int,
        log_path: Path,
        state_dir: Path,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
        join_token: str | None = None,
    ) -> None:
        self.name = name
        args = [sys.executable, "-m", "schedulearn.agent", "--server", server_url]
        args += ["--token", token] if token else []
        args += ["--name", name]
        # Tests run as root with made-up users: jobs run as the agent's own user
        # unless a test passes --run-jobs-as owner (the later option wins).
        args += ["--run-jobs-as", "agent"]
        args += ["--gpus", str(gpus), "--state-dir", str(state_dir), *(extra or [])]
        # No PATH set up here: the agent puts its interpreter's directory first on
        # its jobs' PATH itself (agent.jobenv), so launchers installed beside it
        # (torchrun, horovodrun) are found even when its environment is not activated.
        secret = {"SCHEDULEARN_JOIN_TOKEN": join_token} if join_token else {}
        super().__init__(args, log_path, {**secret, **(env or {})})

    def enroll(self, server: ServerProcess) -> None:
        """Enroll this agent's node on `server` (running), as `node add` does; before `start`."""
        self.env["SCHEDULEARN_JOIN_TOKEN"] = server.join_token(self.name)
