"""A server process listens before it loads its app (`server/startup.py`): /healthz
answers at once, an API call made meanwhile waits and is served by the app
once it is up (never refused), and an app that cannot start ends the process
with status 3, saying why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from served import Served

from schedulearn.cli.freeports import free_port


def test_an_api_call_right_after_healthz_is_served_not_refused(
    empty_database_url: str, tmp_path: Path
) -> None:
    server = Served(empty_database_url, tmp_path / "server.log").start()  # returns at /healthz
    try:
        with server.client() as http:
            reply = http.get("/api/v1/jobs")
            assert reply.status_code == 200, reply.text
            assert http.get("/readyz").status_code == 200
    finally:
        server.stop()


def test_a_server_that_cannot_start_exits_3_saying_why(tmp_path: Path) -> None:
    # Nothing listens on port 1: the database cannot be reached.
    result = subprocess.run(
        [sys.executable, "-m", "schedulearn.cli.main", "server", "--port", str(free_port()),
         "--database-url", "postgresql://nobody@127.0.0.1:1/x"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr[-3000:]
    assert "could not start" in result.stderr
    assert "Connection refused" in result.stderr
