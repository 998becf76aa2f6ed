"""The warm parent (tests/warm_parent.py) gives the suite real processes: a
forked `schedulearn server` is its own process in its own session, reads its
own environment, shows its own command line, writes to the streams it was
given, and ends (and is reported) as a child started by `Popen` would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from server_api import ADMIN, AGENT

import warm_parent
from schedulearn.cli.freeports import free_port
from waiting import wait_until


def _server(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = tmp_path / "server.log"
    env = {
        **os.environ,
        "SCHEDULEARN_ADMIN_TOKEN": ADMIN,
        "SCHEDULEARN_AGENT_TOKEN": AGENT,
        "SCHEDULEARN_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
    }
    args = [sys.executable, "-m", "schedulearn.cli.main", "server", "--port", str(port)]
    with log.open("ab") as out:
        proc = warm_parent.popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    return proc, f"http://127.0.0.1:{port}"


def test_a_forked_server_is_its_own_process_with_its_own_settings(tmp_path: Path) -> None:
    proc, url = _server(tmp_path)
    try:
        assert isinstance(proc, warm_parent.Forked)
        wait_until(
            lambda: httpx.get(f"{url}/readyz", timeout=2).status_code == 200,
            60,
            "the forked server to be ready",
            ignore=(httpx.HTTPError,),
        )
        # Its settings came from the environment it was given (the admin token).
        ok = httpx.get(f"{url}/api/v1/nodes", headers={"Authorization": f"Bearer {ADMIN}"})
        assert ok.status_code == 200
        denied = httpx.get(f"{url}/api/v1/nodes", headers={"Authorization": "Bearer wrong"})
        assert denied.status_code == 401
        # Its own session and process group, and its own command line.
        assert os.getsid(proc.pid) == proc.pid and os.getpgid(proc.pid) == proc.pid
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        assert [a.decode() for a in cmdline] == proc.args
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
    # Ended by a signal: reported as Popen reports a child's end.
    assert proc.wait(30) == -signal.SIGKILL
    assert proc.poll() == -signal.SIGKILL


def test_a_forked_process_exit_code_and_output_are_its_own(tmp_path: Path) -> None:
    out = tmp_path / "out.log"
    args = [sys.executable, "-m", "schedulearn.cli.main", "server", "--no-such-option"]
    with out.open("ab") as log:
        proc = warm_parent.popen(args, stdout=log, stderr=subprocess.STDOUT)
    assert isinstance(proc, warm_parent.Forked)
    assert proc.wait(60) == 2  # click's usage error
    assert "No such option" in out.read_text()
    # As from `python -m`: nothing about a module found imported before it ran.
    assert "RuntimeWarning" not in out.read_text()


def test_an_environment_read_at_interpreter_start_gets_a_fresh_interpreter(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    args = [sys.executable, "-m", "schedulearn.cli.main", "server", "--help"]
    proc = warm_parent.popen(args, env=env, stdout=subprocess.DEVNULL)
    assert not isinstance(proc, warm_parent.Forked)
    assert proc.wait(60) == 0


# `whoami --help`: a CLI command that is not forked, which ends at once (without
# --help it looked for a server for 20 s; the test is about how it starts).
@pytest.mark.parametrize(
    "args", [["-c", "pass"], ["-m", "schedulearn.cli.main", "whoami", "--help"]]
)
def test_other_commands_start_as_they_always_did(args: list[str]) -> None:
    proc = warm_parent.popen([sys.executable, *args], stdout=subprocess.DEVNULL)
    assert not isinstance(proc, warm_parent.Forked)
    proc.wait(60)
