"""`schedulearn up` as an ordinary (non-root) user, in one command (issue 11).

A real unix account is made with `useradd -m` (and removed with `userdel -r`
whatever happens); `up` runs as it through `runuser`, with nothing set up:
its HOME is the new account's home, no SCHEDULEARN_* variables. From a
second "terminal" (the same account), `schedulearn submit` with no server
or token runs a job, which runs as that account; the CLI config and the
agent's credential are the account's, mode 0600; Ctrl-C stops everything.

Needs root to make the account (CI runs as root).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dependencies import Dependency, missing, need_root
from schedulearn.cli.freeports import free_port
from waiting import wait_until, wait_until_serving

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _as_root() -> None:
    need_root("makes a unix account to run `up` as")


@pytest.fixture
def account() -> Iterator[pwd.struct_passwd]:
    """A fresh unix account with a home; removed (home included) at the end."""
    name = f"slup{os.getpid() % 100000}{secrets.token_hex(2)}"
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", "-r", "-f", name], capture_output=True)


def _as(entry: pwd.struct_passwd) -> tuple[list[str], dict[str, str]]:
    """The command prefix and environment of a fresh login of `entry`, with a Python
    it may run that imports schedulearn (this interpreter, or the system's of the
    same version when this one lies under a closed home such as /root)."""
    path = os.pathsep.join(p for p in sys.path if p)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    env = {
        "HOME": entry.pw_dir,
        "USER": entry.pw_name,
        "LOGNAME": entry.pw_name,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": path,
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "200",
    }
    for python in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        prefix = ["runuser", "-u", entry.pw_name, "--", "env", "-i"]
        prefix += [f"{k}={v}" for k, v in env.items()]
        probe = subprocess.run(
            [*prefix, python, "-c", "import schedulearn.cli.main, schedulearn.agent.daemon"],
            capture_output=True,
            timeout=60,
            cwd="/",
        )
        if probe.returncode == 0:
            return [*prefix, python], env
    missing(
        Dependency.SHARED_PYTHON,
        f"no Python interpreter account {entry.pw_name} may run imports schedulearn",
    )


def test_up_as_an_ordinary_user_runs_jobs_as_that_user(account: pwd.struct_passwd) -> None:
    python, _ = _as(account)
    home = Path(account.pw_dir)
    port = free_port()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*python, "-m", "schedulearn.cli.main", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=home,
        )

    up = subprocess.Popen(
        [*python, "-m", "schedulearn.cli.main", "up", "--port", str(port)],
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:

        def running() -> None:
            assert up.poll() is None, up.communicate()[0]

        def joined() -> list[str]:
            running()
            listed = cli("nodes", "--json")
            if listed.returncode != 0:
                return []
            return [n["name"] for n in json.loads(listed.stdout)["items"]]

        wait_until_serving(f"http://127.0.0.1:{port}", 90, running)
        assert wait_until(joined, 90, "the local agent to join") == ["local"]
        submitted = cli("submit", "--gpus", "1", "--", "sh", "-c", 'echo "uid=$(id -u) $HOME"')
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        match = re.search(r"submitted job (\d+)", submitted.stdout)
        assert match, submitted.stdout
        followed = cli("logs", "-f", match.group(1))
        assert followed.returncode == 0, followed.stdout + followed.stderr
        # The job ran as the account that ran `up`, in its home.
        assert f"uid={account.pw_uid} {home}" in followed.stdout, followed.stdout
        jobs = json.loads(cli("jobs", "--json").stdout)["items"]
        assert [j["state"] for j in jobs] == ["succeeded"], jobs

        # Everything `up` wrote is the account's and private to it.
        config = home / ".config" / "schedulearn" / "cli.json"
        (credential,) = (home / ".local" / "state").rglob("credential.json")
        database = home / ".local" / "share" / "schedulearn" / "schedulearn.db"
        for path in (config, credential, database):
            info = path.stat()
            assert info.st_uid == account.pw_uid, path
        for path in (config, credential):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        token = json.loads(config.read_text())["token"]
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        try:
            said, _ = up.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            raise
    assert up.returncode in (0, 130) and "Traceback" not in said, said
    assert f"are in {config} (readable only by you)" in said, said
    assert token not in said
    assert cli("nodes").returncode != 0, "the server still answers after Ctrl-C"
