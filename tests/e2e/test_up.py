"""The README's run command as a new user meets it: `schedulearn up` in an empty
home (no configuration, no database), then the documented `schedulearn submit`
of `examples/train_toy.py` from a second terminal that passes no server or
token, `logs`, and Ctrl-C, which stops the agent and the server cleanly. No
token is printed: they are in the CLI config, mode 0600."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

from schedulearn.cli.freeports import free_port
from schedulearn.cli.live import has_nvidia_gpus
from waiting import wait_until, wait_until_serving

REPO = Path(__file__).resolve().parents[2]


def _fresh_user(home: Path) -> dict[str, str]:
    """A user with nothing set up: no SCHEDULEARN_* variables, XDG dirs under `home`,
    and the interpreter's scripts directory first on PATH, as `uv run` puts it."""
    # Nor `uv run`'s marks, which a test run under `uv run` would hand down.
    fresh = ("SCHEDULEARN_", "UV_RUN_RECURSION_DEPTH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(fresh)}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "schedulearn.cli.main", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _nodes(env: dict[str, str]) -> list[tuple[str, int]]:
    """(name, GPUs) of the nodes the CLI's configured server lists; [] until it answers."""
    listed = _cli(env, "nodes", "--json")
    if listed.returncode != 0:
        return []
    return [(n["name"], len(n["gpus"])) for n in json.loads(listed.stdout)["items"]]


def test_up_then_submit_the_readme_example_then_ctrl_c(tmp_path: Path) -> None:
    env = _fresh_user(tmp_path)
    config = tmp_path / ".config" / "schedulearn" / "cli.json"
    port = free_port()
    up = subprocess.Popen(
        [sys.executable, "-m", "schedulearn.cli.main", "up", "--port", str(port)],
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

        def joined() -> list[tuple[str, int]]:
            running()
            return _nodes(env)

        wait_until_serving(f"http://127.0.0.1:{port}", 60, running)
        nodes = wait_until(joined, 60, "the local agent to join")
        # 4 virtual GPUs where there are no NVIDIA GPUs, else the real ones.
        assert nodes == [("local", 4)] or (has_nvidia_gpus() and nodes[0][0] == "local"), nodes
        written = json.loads(config.read_text())
        assert written["server"] == f"http://127.0.0.1:{port}"
        # The admin token is in the CLI config, readable by this user only; the
        # agent's credential is in its own state directory (0600), not the config.
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        assert written["token"] and not written.get("agent_token")
        (credential,) = (tmp_path / ".local" / "state").rglob("credential.json")
        assert stat.S_IMODE(credential.stat().st_mode) == 0o600
        agent_secret = json.loads(credential.read_text())["credential"]
        # The running agent got it from that file: it is on no command line.
        assert _processes_naming(f"127.0.0.1:{port}"), "no agent process to look at"
        assert not _processes_naming(agent_secret)

        submitted = subprocess.run(
            ["bash", "-c", "schedulearn submit --gpus 1 -- python examples/train_toy.py"],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr
        match = re.search(r"submitted job (\d+)", submitted.stdout)
        assert match, submitted.stdout
        job_id = match.group(1)

        followed = _cli(env, "logs", "-f", job_id)
        assert followed.returncode == 0, followed.stdout + followed.stderr
        assert re.search(rf"job {job_id}: GPUs \[\d\] \(1\)", followed.stdout), followed.stdout
        shown = json.loads(_cli(env, "jobs", "--json").stdout)["items"]
        assert [(j["id"], j["state"]) for j in shown] == [(int(job_id), "succeeded")]
        assert (tmp_path / ".local" / "share" / "schedulearn" / "schedulearn.db").exists()
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            said, _ = up.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            raise
    # 130 = 128 + SIGINT, the shell's code for a run ended by Ctrl-C; no traceback.
    assert up.returncode in (0, 130) and "Traceback" not in said, said
    assert "stopping the agent, then the server" in said
    assert "local agent 'local'" in said
    # `up` says where the tokens are, and prints none of them.
    assert f"are in {config} (readable only by you)" in said, said
    # This install's scripts are first on this user's PATH: `up` names the bare
    # command, the one that ran `submit` above (through the shell, by name).
    assert "from another shell: schedulearn submit --gpus 1 -- echo hello" in said, said
    assert written["token"] not in said and agent_secret not in said
    assert not re.search(r"sl(ad|us|ag)_", said), said
    assert _cli(env, "nodes").returncode != 0, "the server still answers after Ctrl-C"
    assert not _processes_naming(f"127.0.0.1:{port}"), "the agent outlived Ctrl-C"


def _processes_naming(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it ended meanwhile
        if text in args:
            found.append(args)
    return found
