"""`schedulearn up` started by the project's `.venv/bin/schedulearn`, from a
shell where that environment is not activated (its `bin` is not on PATH): the
local agent runs under the same interpreter as `up`, a job's `python` is that
interpreter (so `import schedulearn.runtime` works, as the examples need), and
`up` says which `python` jobs get. docs/job-environment.md is the contract."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from schedulearn.cli.freeports import free_port
from waiting import wait_until, wait_until_serving

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
BASE_BIN = Path(os.path.realpath(sys.executable)).parent
PLAIN_PATH = os.pathsep.join([str(BASE_BIN), "/usr/local/bin", "/usr/bin", "/bin"])


def _plain_user(home: Path) -> dict[str, str]:
    """A fresh user whose PATH lacks the project's virtual environment."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SCHEDULEARN_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")
    }
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        PATH=PLAIN_PATH,
        PYTHONUNBUFFERED="1",
    )
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "schedulearn"), *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ups_agent_gives_jobs_the_projects_python(tmp_path: Path) -> None:
    env = _plain_user(tmp_path)
    port = free_port()
    up = subprocess.Popen(
        [str(VENV_BIN / "schedulearn"), "up", "--gpus", "1", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:

        def running() -> None:
            assert up.poll() is None, up.communicate()[0]

        def joined() -> bool:
            running()
            listed = _cli(env, "nodes", "--json")
            return listed.returncode == 0 and bool(json.loads(listed.stdout)["items"])

        wait_until_serving(f"http://127.0.0.1:{port}", 60, running)
        wait_until(joined, 60, "the local agent to join")
        probe = "import sys, schedulearn.runtime; print(sys.executable)"
        submitted = _cli(env, "submit", "--json", "--", "python", "-c", probe)
        assert submitted.returncode == 0, submitted.stderr
        job_id = str(json.loads(submitted.stdout)["ids"][0])
        followed = _cli(env, "logs", "-f", job_id)
        assert followed.returncode == 0, followed.stdout + followed.stderr
        assert str(VENV_BIN / "python") in followed.stdout.splitlines(), followed.stdout
        shown = json.loads(_cli(env, "show", job_id, "--json").stdout)
        assert shown["state"] == "succeeded", shown
        # The agent is `up`'s own interpreter, not a `python` found on PATH.
        (agent,) = _processes_naming(f"--server http://127.0.0.1:{port}")
        assert agent.startswith(f"{sys.executable} -m schedulearn.agent"), agent
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
        try:
            said, _ = up.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            raise
    assert re.search(
        rf"process jobs: python is {re.escape(str(VENV_BIN / 'python'))} "
        r"\(Python [\d.]+, with schedulearn\)",
        said,
    ), said


def _processes_naming(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it ended meanwhile
        if text in args:
            found.append(args.strip())
    return found
