"""`schedulearn server` as a real uvicorn process: first-start tokens, the
database named by SCHEDULEARN_DATABASE_URL, migrations, and a restart."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from schedulearn.cli.localcluster import free_port
from waiting import wait_until


def start(database_url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    env["SCHEDULEARN_DATABASE_URL"] = database_url
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "schedulearn.cli.main", "server", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip

    def healthy() -> bool:
        assert proc.poll() is None, log.read_text()
        # /readyz, not /healthz: the server answers /healthz as soon as it
        # listens, before its start-up (migrations, first tokens) is done.
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200

    wait_until(healthy, 60, "the server to answer /readyz", ignore=(httpx.HTTPError,))
    return proc


def test_first_start_shows_tokens_once_and_they_work(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    proc = start(database_url, port, log)
    try:
        text = log.read_text()
        admin = re.search(r"admin token: (\S+)", text)
        agent = re.search(r"agent token: (\S+)", text)
        assert admin and agent, text
        url = f"http://127.0.0.1:{port}"
        me = httpx.get(f"{url}/api/v1/whoami", headers={"Authorization": f"Bearer {admin[1]}"})
        assert me.json() == {"user": "admin", "role": "admin"}
        reg = httpx.post(
            f"{url}/api/v1/agent/register",
            headers={"Authorization": f"Bearer {agent[1]}"},
            json={"name": "n1", "gpus": [{"index": 0}]},
        )
        assert reg.status_code == 200
        job = httpx.post(
            f"{url}/api/v1/jobs",
            headers={"Authorization": f"Bearer {admin[1]}"},
            json={"command": "true"},
        )
        assert job.status_code == 201
    finally:
        proc.kill()  # like a crash: the next start must find everything
        proc.wait()
    log.write_text("")
    proc = start(database_url, port, log)
    try:
        assert "token" not in log.read_text()  # shown once, at the first start only
        url = f"http://127.0.0.1:{port}"
        jobs = httpx.get(f"{url}/api/v1/jobs", headers={"Authorization": f"Bearer {admin[1]}"})
        assert jobs.json()["total"] == 1  # the committed job survived SIGKILL
        assert httpx.get(f"{url}/healthz").json()["database"] in ("sqlite", "postgresql")
    finally:
        proc.terminate()
        # uvicorn shuts down cleanly, then re-raises SIGTERM for its exit status.
        assert proc.wait(timeout=20) in (0, -15)
        assert "Application shutdown complete" in log.read_text()
