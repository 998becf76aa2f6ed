"""`Served`: `schedulearn server` as a real uvicorn process on 127.0.0.1, with
the tests' tokens, for tests of how the server holds under faults and abuse
(hostile bodies, a database that goes away or fills up)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from pg_server import own_stores
from server_api import ADMIN, AGENT

import warm_parent
from schedulearn.cli.freeports import free_port
from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION, JobPublic
from waiting import wait_until


class Served:
    """One server process; `start()` returns once /healthz answers."""

    def __init__(self, database_url: str, log: Path, **settings: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
        self.env.update(
            SCHEDULEARN_DATABASE_URL=database_url,
            SCHEDULEARN_ADMIN_TOKEN=ADMIN,
            SCHEDULEARN_AGENT_TOKEN=AGENT,
            SCHEDULEARN_PRINT_TOKENS="false",
            SCHEDULEARN_LOG_LEVEL="warning",
        )
        settings = {**own_stores(database_url, log.parent), **settings}
        self.env.update({f"SCHEDULEARN_{k.upper()}": v for k, v in settings.items()})
        self.proc: subprocess.Popen[bytes] | None = None
        self.admin = {"Authorization": f"Bearer {ADMIN}"}

    def start(self, timeout: float = 60.0) -> Served:
        with self.log.open("ab") as out:
            self.proc = warm_parent.popen(
                [sys.executable, "-m", "schedulearn.cli.main", "server", "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, env=self.env,
            )  # fmt: skip

        def healthy() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200

        wait_until(healthy, timeout, "the server to answer /healthz", ignore=(httpx.HTTPError,))
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.admin, timeout=timeout)


class ServedApi:
    """What `WireAgent` needs of an API (`server_api.Api`), over a `Served` server's
    client (`Served.client()`), speaking this release's protocol."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        # This release's protocol: older clients' replies leave out `WorkBatch.at`.
        http.headers[PROTOCOL_HEADER] = str(PROTOCOL_VERSION)
        self._nodes: dict[str, dict[str, str]] = {}

    def get(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        return self.http.get(path, headers=headers, **kw)

    def post(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        return self.http.post(path, headers=headers, **kw)

    def node(self, name: str) -> dict[str, str]:
        if name not in self._nodes:
            r = self.http.post("/api/v1/nodes", json={"name": name})
            assert r.status_code == 201, r.text
            joined = self.http.post(
                "/api/v1/agent/join", json={"join_token": r.json()["join_token"]}
            )
            assert joined.status_code == 200, joined.text
            self._nodes[name] = {"Authorization": f"Bearer {joined.json()['credential']}"}
        return self._nodes[name]

    def submit(self, **spec: Any) -> int:
        """Submit one job (`["true"]` on one GPU unless `spec` says otherwise): its id."""
        r = self.http.post("/api/v1/jobs", json={"command": ["true"], "gpus": 1, **spec})
        assert r.status_code == 201, r.text
        return int(r.json()["ids"][0])

    def job(self, job_id: int) -> JobPublic:
        r = self.http.get(f"/api/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return JobPublic.model_validate(r.json())


def served_api(database_url: str, log: Path, **settings: str) -> Iterator[ServedApi]:
    """A `Served` server with `settings`, started, its API yielded, then stopped:
    for a fixture to `yield from`."""
    server = Served(database_url, log, **settings).start()
    try:
        with server.client() as http:
            yield ServedApi(http)
    finally:
        server.stop()
