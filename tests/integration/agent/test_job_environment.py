"""The job environment contract (docs/job-environment.md) against a real server
and a real agent started the way people start it: by the absolute path of the
project's `.venv/bin/schedulearn`, from a shell whose PATH does not contain
that virtual environment.

- a job's `python` is the agent's own interpreter, so the examples' `import
  schedulearn.runtime` works; the agent says which interpreter that is;
- `--path` sets the job's PATH (and so which `python` a job gets);
- `--env KEY=VALUE` reaches every job; the job's own env wins over it, and
  Schedulearn's variables win over both;
- a bad `--env` is refused before the agent starts, saying what to change.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from agent_support import AdminApi, Proc, ServerProc, join_token

from waiting import wait_until

VENV_BIN = Path(sys.executable).parent
SCRIPT = VENV_BIN / "schedulearn"
# The interpreter the virtual environment was made from: a `python` without
# Schedulearn installed, what a job found on a plain PATH before the contract.
BASE_BIN = Path(os.path.realpath(sys.executable)).parent
PLAIN_PATH = os.pathsep.join([str(BASE_BIN), "/usr/local/bin", "/usr/bin", "/bin"])
SHOW = "import sys, schedulearn.runtime; print('python', sys.executable)"


def _plain_env() -> dict[str, str]:
    """The test's environment with the virtual environment off PATH (not activated)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = PLAIN_PATH
    return env


class ScriptAgent(Proc):
    """`/abs/.venv/bin/schedulearn agent ...` with a PATH that lacks the venv."""

    def __init__(self, server: ServerProc, tmp_path: Path, name: str, *options: str) -> None:
        args = [str(SCRIPT), "agent", "--server", server.url, "--name", name, "--gpus", "1"]
        args += ["--run-jobs-as", "agent", "--state-dir", str(tmp_path / f"state-{name}")]
        args += ["--log-level", "debug", *options]
        env = _plain_env()
        env["SCHEDULEARN_JOIN_TOKEN"] = join_token(server.url, name)
        super().__init__(args, tmp_path / f"agent-{name}.log", env)

    def start(self) -> None:
        # Proc merges os.environ; this agent must see only the plain PATH.
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.args,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**self.env, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )


@pytest.fixture
def script_agent(server: ServerProc, tmp_path: Path):  # type: ignore[no-untyped-def]  # a factory fixture
    started: list[ScriptAgent] = []

    def start(name: str, *options: str) -> ScriptAgent:
        agent = ScriptAgent(server, tmp_path, name, *options)
        agent.start()
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


def _run(api: AdminApi, command: str, **spec: object) -> tuple[str, list[str]]:
    job = api.submit(command=command, gpus=1, **spec)
    done = api.wait_state(job, {"succeeded", "failed"}, timeout=60)
    return str(done["state"]), api.texts(job)


def test_a_job_of_an_agent_started_by_its_venv_path_imports_schedulearn(
    api: AdminApi, script_agent, server: ServerProc
) -> None:  # type: ignore[no-untyped-def]  # script_agent is a factory fixture
    agent = script_agent("venv-node")
    wait_until(lambda: api.node("venv-node"), 60, "the agent to register", until=bool)
    state, lines = _run(api, f'python -c "{SHOW}"')
    assert state == "succeeded", lines
    assert f"python {VENV_BIN / 'python'}" in lines, lines
    # The agent said, at start, which interpreter jobs get and the PATH.
    log = agent.log()
    assert f"python is {VENV_BIN / 'python'}" in log, log
    assert f"PATH={VENV_BIN}{os.pathsep}{PLAIN_PATH}" in log, log
