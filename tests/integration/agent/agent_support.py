"""Helpers for the agent's integration tests: real server and agent processes
on 127.0.0.1, a small admin API client, and container engines.

The server runs as `schedulearn server` and the agent as
`python -m schedulearn.agent`, each its own process (so a test can kill
either with SIGKILL), and the tests speak to them over HTTP only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
from pg_server import own_stores

import warm_parent
from schedulearn.cli.freeports import free_port
from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from waiting import wait_until

HERE = Path(__file__).parent
ENGINE_SCRIPT = HERE / "docker_engine.sh"
TEST_IMAGE = "schedulearn-test-busybox:latest"
ADMIN_TOKEN = "agent-tests-admin-token"
AGENT_TOKEN = "agent-tests-agent-token"


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie, ended but not reaped, is not)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):  # gone, or reaped between the two
        return False
    return stat[stat.rindex(")") + 2] != "Z"


class Proc:
    """A child process in its own session, its output in a log file."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.args = args
        self.log_path = log_path
        self.env = env
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.popen = warm_parent.popen(
                self.args,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is cleaned up."""
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


class ServerProc(Proc):
    """`schedulearn server` on a free port, with known tokens and quick timings."""

    def __init__(
        self,
        database_url: str,
        log_path: Path,
        port: int | None = None,
        node_timeout: float = 15.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "schedulearn.cli.main", "server"]
        args += ["--host", "127.0.0.1", "--port", str(self.port), "--database-url", database_url]
        super().__init__(
            args,
            log_path,
            {
                "SCHEDULEARN_ADMIN_TOKEN": ADMIN_TOKEN,
                "SCHEDULEARN_AGENT_TOKEN": AGENT_TOKEN,
                "SCHEDULEARN_HEARTBEAT_SECONDS": "0.5",
                # Long enough for an agent to restart on a busy 2-core machine.
                "SCHEDULEARN_NODE_TIMEOUT_SECONDS": str(node_timeout),
                "SCHEDULEARN_STOP_GRACE_SECONDS": "2",
                "SCHEDULEARN_LOG_LEVEL": "warning",
                "SCHEDULEARN_PRINT_TOKENS": "false",
                **{
                    f"SCHEDULEARN_{k.upper()}": v
                    for k, v in own_stores(database_url, log_path.parent).items()
                },
                **(env or {}),
            },
        )

    def start_ready(self, timeout: float = 30.0) -> ServerProc:
        self.start()

        def ready() -> bool:
            if not self.alive:
                raise AssertionError(f"the server exited early:\n{self.log()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            return False

        wait_until(ready, timeout, "the server to answer /healthz")
        return self


def join_token(server_url: str, node: str) -> str:
    """Enroll `node` as the admin (`schedulearn node add`): its one-time join token."""
    r = httpx.post(
        f"{server_url}/api/v1/nodes",
        json={"name": node},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        # Often the first call after start, which waits for the app to load.
        timeout=60,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["join_token"])


class AgentProc(Proc):
    """`python -m schedulearn.agent` with virtual GPUs.

    Without a `token`, its node is enrolled at the first `start` (a join
    token in the environment, exchanged for the node's own credential,
    which later starts find in the state directory); a `token` is passed
    with `--token`, as agents of earlier releases take it.
    """

    def __init__(
        self,
        server_url: str,
        name: str,
        state_dir: Path,
        log_path: Path,
        gpus: int = 4,
        extra: Iterable[str] = (),
        token: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.state_dir = state_dir
        self.server_url = server_url
        self.token = token
        args = [sys.executable, "-m", "schedulearn.agent", "--server", server_url]
        args += ["--token", token] if token is not None else []
        args += ["--name", name, "--gpus", str(gpus)]
        # Tests run as root with made-up users: jobs run as the agent's own user
        # unless a test passes --run-jobs-as owner (the later option wins).
        args += ["--run-jobs-as", "agent"]
        args += ["--state-dir", str(state_dir), "--log-level", "debug", *extra]
        super().__init__(args, log_path, dict(env or {}))

    def start(self) -> None:
        given = {"SCHEDULEARN_JOIN_TOKEN", "SCHEDULEARN_AGENT_TOKEN"} & self.env.keys()
        if self.token is None and not given:
            self.env["SCHEDULEARN_JOIN_TOKEN"] = join_token(self.server_url, self.name)
        super().start()


class AdminApi:
    """The user API, as the admin, over real HTTP, speaking this release's
    protocol as the CLI does (a call without it is answered as protocol 1)."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(
            base_url=url + "/api/v1",
            headers={
                "Authorization": f"Bearer {ADMIN_TOKEN}",
                PROTOCOL_HEADER: str(PROTOCOL_VERSION),
            },
            timeout=10.0,
        )

    def close(self) -> None:
        self.http.close()

    def submit(self, **spec: Any) -> int:
        r = self.http.post("/jobs", json=spec)
        assert r.status_code in (200, 201), r.text
        ids: list[int] = r.json()["ids"]
        return ids[0]

    def job(self, job_id: int) -> dict[str, Any]:
        r = self.http.get(f"/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def wait_state(
        self, job_id: int, states: Iterable[str], timeout: float = 30.0
    ) -> dict[str, Any]:
        wanted = set(states)

        return wait_until(
            lambda: self.job(job_id),
            timeout,
            f"job {job_id} to be {sorted(wanted)}",
            until=lambda job: job.get("state") in wanted,
            ignore=(httpx.HTTPError,),
        )

    def logs(self, job_id: int) -> list[dict[str, Any]]:
        r = self.http.get(f"/jobs/{job_id}/logs")
        assert r.status_code == 200, r.text
        return list(r.json()["lines"])

    def texts(self, job_id: int, stream: str | None = None) -> list[str]:
        return [
            line["text"] for line in self.logs(job_id) if stream is None or line["stream"] == stream
        ]

    def cancel(self, job_id: int) -> dict[str, Any]:
        r = self.http.post(f"/jobs/{job_id}/cancel")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def node(self, name: str) -> dict[str, Any] | None:
        r = self.http.get("/nodes")
        assert r.status_code == 200, r.text
        for node in r.json()["items"]:
            if node["name"] == name:
                return dict(node)
        return None


# --- container engines ------------------------------------------------------


def ensure_docker() -> str | None:
    """Start the Docker engine and build the test image; None (and why) if impossible."""
    if shutil.which("bash") is None:
        return None
    result = subprocess.run(
        ["bash", str(ENGINE_SCRIPT)], capture_output=True, text=True, timeout=600
    )
    if result.returncode != 0:
        return None
    return TEST_IMAGE


class PodmanService:
    """`podman system service` on a private socket, with the test image loaded.

    Its containers.conf lowers the default ulimits: Podman raises
    RLIMIT_NOFILE/NPROC to values a host without CAP_SYS_RESOURCE (a
    container or a VM sandbox) may not grant, and runc then refuses to start.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "podman.sock"
        self.url = f"unix://{self.socket}"
        self.conf = root / "containers.conf"
        self.conf.write_text(
            '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n'
        )
        self.env = {**os.environ, "CONTAINERS_CONF": str(self.conf)}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.root / "service.log").open("ab")
        self.proc = subprocess.Popen(
            ["podman", "system", "service", "--time=0", self.url],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        log.close()
        wait_until(self.socket.exists, 30, "the podman socket")
        has_image = subprocess.run(
            ["podman", "image", "exists", TEST_IMAGE], env=self.env, capture_output=True
        )
        if has_image.returncode != 0:
            # The same image as Docker's, so both engines run the same tests.
            save = subprocess.Popen(["docker", "save", TEST_IMAGE], stdout=subprocess.PIPE)
            subprocess.run(
                ["podman", "load"], stdin=save.stdout, env=self.env, check=True, capture_output=True
            )
            save.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


StartAgent = Callable[..., AgentProc]
"""What the `start_agent` fixture hands a test: start an agent by name."""
