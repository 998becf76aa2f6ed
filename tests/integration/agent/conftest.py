"""Fixtures for the node agent's tests: container engines, and real server and
agent processes on 127.0.0.1.

- `docker_image`: a running Docker engine (started by `docker_engine.sh`
  when none answers) and the locally built busybox test image;
- `podman_url`: Podman's Docker-compatible socket (skipped without podman);
- `server`: `schedulearn server` as a process, on this test's database
  (SQLite, or PostgreSQL when the integration suite runs on it);
- `start_agent`: starts `python -m schedulearn.agent` processes, killed
  at the end of the test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_support import (
    AdminApi,
    AgentProc,
    PodmanService,
    ServerProc,
    StartAgent,
    ensure_docker,
)

from dependencies import Dependency, missing
from schedulearn.agent.executors.process import is_job_shim
from schedulearn.agent.state import StateStore


@pytest.fixture(scope="session")
def docker_image() -> str:
    image = ensure_docker()
    if image is None:
        missing(
            Dependency.DOCKER,
            "tests/integration/agent/docker_engine.sh could not start one or build the test image",
        )
    return image


PODMAN_INITS = ("/usr/libexec/podman/catatonit", "/usr/bin/catatonit")


@pytest.fixture(scope="session")
def podman_url(docker_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("podman") is None:
        missing(Dependency.PODMAN, "no podman on PATH")
    if not any(Path(p).exists() for p in PODMAN_INITS):
        # Job containers run with an init by default; Podman's is catatonit.
        missing(Dependency.PODMAN, f"no init binary for its containers ({', '.join(PODMAN_INITS)})")
    service = PodmanService(tmp_path_factory.mktemp("podman"))
    try:
        service.start()
    except (subprocess.CalledProcessError, AssertionError) as exc:
        service.stop()
        missing(Dependency.PODMAN, f"its socket did not come up: {exc}")
    try:
        yield service.url
    finally:
        service.stop()


@pytest.fixture
def agent_database_url(database_url: str) -> str:
    """The integration suite's database: SQLite, PostgreSQL, or each in turn
    (a static dependency, so `SCHEDULEARN_TEST_POSTGRES=both` runs these on both)."""
    return database_url


@pytest.fixture
def server(
    request: pytest.FixtureRequest, agent_database_url: str, tmp_path: Path
) -> Iterator[ServerProc]:
    """Parametrize indirectly with {"node_timeout": seconds} for a quicker node
    timeout, or {"env": {...}} for settings of the server's own."""
    options = getattr(request, "param", {})
    proc = ServerProc(agent_database_url, tmp_path / "server.log", **options)
    proc.start_ready()
    try:
        yield proc
    finally:
        proc.kill()


@pytest.fixture
def api(server: ServerProc) -> Iterator[AdminApi]:
    client = AdminApi(server.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def start_agent(server: ServerProc, tmp_path: Path) -> Iterator[StartAgent]:
    started: list[AgentProc] = []

    def start(
        name: str = "n1",
        gpus: int = 4,
        extra: tuple[str, ...] = (),
        token: str | None = None,
        env: dict[str, str] | None = None,
    ) -> AgentProc:
        agent = AgentProc(
            server.url,
            name,
            tmp_path / f"state-{name}",
            tmp_path / f"agent-{name}.log",
            gpus=gpus,
            extra=extra,
            token=token,
            env=env,
        )
        agent.start()
        started.append(agent)
        return agent

    try:
        yield start
    finally:
        for agent in started:
            agent.kill()
        # Jobs outlive a killed agent by design; end the ones the tests left.
        for agent in started:
            _kill_leftover_jobs(agent.state_dir)


def _kill_leftover_jobs(state_dir: Path) -> None:
    for record in StateStore(state_dir).load_all():
        if record.pid is not None and is_job_shim(record.pid, record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pid, signal.SIGKILL)
        if record.container_id:
            subprocess.run(["docker", "rm", "-f", record.container_id], capture_output=True)
