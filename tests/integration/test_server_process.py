"""`schedulearn server` as a real uvicorn process: first-start tokens (to a 0600
file, never the log), the database named by SCHEDULEARN_DATABASE_URL,
migrations, and a restart."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import httpx

from schedulearn.cli.freeports import free_port
from waiting import wait_until


def start(database_url: str, port: int, log: Path, token_file: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    env["SCHEDULEARN_DATABASE_URL"] = database_url
    env["SCHEDULEARN_TOKEN_FILE"] = str(token_file)
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

    wait_until(healthy, 90, "the server to answer /readyz", ignore=(httpx.HTTPError,))
    return proc


def test_first_start_writes_tokens_to_a_private_file_never_the_log(
    empty_database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    token_file = tmp_path / "secrets" / "first-tokens"
    proc = start(empty_database_url, port, log, token_file)
    try:
        text = log.read_text()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        written = token_file.read_text()
        admin = re.search(r"^admin_token=(\S+)$", written, re.M)
        agent = re.search(r"^agent_token=(\S+)$", written, re.M)
        assert admin and agent, written
        # The log says where they are, and holds neither.
        assert str(token_file) in text and "readable only by you" in text, text
        assert admin[1] not in text and agent[1] not in text
        url = f"http://127.0.0.1:{port}"
        me = httpx.get(f"{url}/api/v1/whoami", headers={"Authorization": f"Bearer {admin[1]}"})
        assert (me.json()["user"], me.json()["role"]) == ("admin", "admin")
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
    token_file.unlink()
    proc = start(empty_database_url, port, log, token_file)
    try:
        # Made once, at the first start only.
        assert "token" not in log.read_text() and not token_file.exists()
        url = f"http://127.0.0.1:{port}"
        jobs = httpx.get(f"{url}/api/v1/jobs", headers={"Authorization": f"Bearer {admin[1]}"})
        assert jobs.json()["total"] == 1  # the committed job survived SIGKILL
        assert httpx.get(f"{url}/healthz").json()["database"] in ("sqlite", "postgresql")
    finally:
        proc.terminate()
        # uvicorn shuts down cleanly, then re-raises SIGTERM for its exit status.
        assert proc.wait(timeout=20) in (0, -15)
        assert "Application shutdown complete" in log.read_text()
