"""The job environment contract (docs/job-environment.md) against a real server
and a real agent started the way people start it: by the absolute path of the
project's `.venv/bin/schedulearn`, from a shell whose PATH does not contain
that virtual environment.

- a job's `python` is the agent's own interpreter, so the examples' `import
  schedulearn.runtime` works; the agent says which interpreter that is;
- `--path` sets the job's PATH (and so which `python` a job gets);
- `--env KEY=VALUE` reaches every job; the job's own env wins over it, and
  Schedulearn's variables win over both; nothing else of the agent's own
  environment (a secret its service was given) reaches a job;
- a bad `--env` is refused before the agent starts, saying what to change.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agent_support import AdminApi, Proc, ServerProc, join_token

from waiting import wait_until

VENV_BIN = Path(sys.executable).parent
SCRIPT = VENV_BIN / "schedulearn"
# The interpreter the virtual environment was made from: a Python without
# Schedulearn installed, what a job found on a plain PATH before the contract.
# Called by its own file name (`python3.11`): Debian's /usr/bin has no `python`.
BASE_PYTHON = Path(os.path.realpath(sys.executable))
BASE_BIN = BASE_PYTHON.parent
PLAIN_PATH = os.pathsep.join([str(BASE_BIN), "/usr/local/bin", "/usr/bin", "/bin"])
SHOW = "import sys, schedulearn.runtime; print('python', sys.executable)"


def _plain_env() -> dict[str, str]:
    """The test's environment with the virtual environment off PATH (not activated)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = PLAIN_PATH
    return env


class ScriptAgent(Proc):
    """`/abs/.venv/bin/schedulearn agent ...` with a PATH that lacks the venv."""

    def __init__(
        self,
        server: ServerProc,
        tmp_path: Path,
        name: str,
        *options: str,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        args = [str(SCRIPT), "agent", "--server", server.url, "--name", name, "--gpus", "1"]
        args += ["--run-jobs-as", "agent", "--state-dir", str(tmp_path / f"state-{name}")]
        args += ["--log-level", "debug", *options]
        env = _plain_env()
        env.update(extra_env or {})
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


StartScriptAgent = Callable[..., ScriptAgent]


@pytest.fixture
def script_agent(server: ServerProc, tmp_path: Path) -> Iterator[StartScriptAgent]:
    started: list[ScriptAgent] = []

    def start(name: str, *options: str, extra_env: dict[str, str] | None = None) -> ScriptAgent:
        agent = ScriptAgent(server, tmp_path, name, *options, extra_env=extra_env)
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
    api: AdminApi, script_agent: StartScriptAgent, server: ServerProc
) -> None:
    agent = script_agent("venv-node")
    wait_until(lambda: api.node("venv-node"), 60, "the agent to register", until=bool)
    state, lines = _run(api, f'python -c "{SHOW}"')
    assert state == "succeeded", lines
    assert f"python {VENV_BIN / 'python'}" in lines, lines
    # The agent said, at start, which interpreter jobs get and the PATH.
    log = agent.log()
    assert f"python is {VENV_BIN / 'python'}" in log, log
    assert f"PATH={VENV_BIN}{os.pathsep}{PLAIN_PATH}" in log, log


def test_path_chooses_the_python_a_job_gets(api: AdminApi, script_agent: StartScriptAgent) -> None:
    agent = script_agent("plain-node", "--path", PLAIN_PATH)
    wait_until(lambda: api.node("plain-node"), 60, "the agent to register", until=bool)
    state, lines = _run(
        api, f"{BASE_PYTHON.name} -c 'import sys; print(sys.executable)'; echo $PATH"
    )
    assert state == "succeeded", lines
    # The PATH given, as given; its python is the base interpreter, not the agent's.
    assert lines[1] == PLAIN_PATH, lines
    assert Path(lines[0]).parent == BASE_BIN, lines
    state, lines = _run(api, f'{BASE_PYTHON.name} -c "{SHOW}"')
    assert state == "failed" and "No module named 'schedulearn'" in lines[-1], lines
    log = agent.log()
    assert f"PATH={PLAIN_PATH} (from --path)" in log, log
    assert "without schedulearn: jobs that import schedulearn.runtime fail" in log, log


def test_env_reaches_every_job_under_the_jobs_own_env(
    api: AdminApi, script_agent: StartScriptAgent
) -> None:
    options = ("--env", "HF_HOME=/data/hf", "--env", "EQ=a=b", "--env", "SHARED=agent")
    # What the agent's own environment holds beyond the allowlist (a service
    # manager's secret) never reaches a job; its locale does.
    secret = {"CLOUD_SECRET_KEY": "agent-only-4f1c", "LC_ALL": "C.UTF-8"}
    agent = script_agent("env-node", *options, extra_env=secret)
    wait_until(lambda: api.node("env-node"), 60, "the agent to register", until=bool)
    show = 'echo "$HF_HOME|$EQ|$SHARED|$SCHEDULEARN_NUM_GPUS|$CLOUD_SECRET_KEY|$LC_ALL"'
    state, lines = _run(api, show)
    assert (state, lines) == ("succeeded", ["/data/hf|a=b|agent|1||C.UTF-8"])
    # The job's own env wins over --env; Schedulearn's variables win over both.
    state, lines = _run(api, show, env={"SHARED": "job", "SCHEDULEARN_NUM_GPUS": "8"})
    assert (state, lines) == ("succeeded", ["/data/hf|a=b|job|1||C.UTF-8"])
    assert "every job also gets --env EQ, HF_HOME, SHARED" in agent.log()


@pytest.mark.docker
def test_env_reaches_container_jobs_whose_path_is_the_images(
    api: AdminApi, script_agent: StartScriptAgent, docker_image: str
) -> None:
    options = ("--executor", "docker", "--env", "HF_HOME=/data/hf", "--path", PLAIN_PATH)
    agent = script_agent("box-node", *options)
    wait_until(lambda: api.node("box-node"), 60, "the agent to register", until=bool)
    state, lines = _run(api, 'echo "$HF_HOME|$PATH"', image=docker_image)
    assert state == "succeeded", lines
    home, path = lines[0].split("|")
    assert home == "/data/hf"
    assert path != PLAIN_PATH and str(VENV_BIN) not in path, path
    assert "container jobs: PATH and python are their image's" in agent.log()


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (("--env", "FOO"), "--env 'FOO' has no '='; write it as KEY=VALUE"),
        (("--env", "1X=y"), "'1X' is not a variable name"),
        (("--env", "SCHEDULEARN_JOB_ID=3"), "--env cannot set SCHEDULEARN_JOB_ID"),
        (("--env", "CUDA_VISIBLE_DEVICES=0"), "--env cannot set CUDA_VISIBLE_DEVICES"),
        (("--env", "PATH=/opt/bin"), "give the job PATH with --path DIRS"),
        (("--path", "bin:/usr/bin"), "bin is not absolute"),
        (("--path", "/usr/bin::/bin"), "has an empty entry"),
    ],
)
def test_a_bad_env_or_path_is_refused_saying_what_to_change(
    tmp_path: Path, option: tuple[str, str], said: str
) -> None:
    refused = subprocess.run(
        [
            str(SCRIPT),
            "agent",
            "--server",
            "http://127.0.0.1:9",
            "--state-dir",
            str(tmp_path),
            *option,
        ],
        env={**_plain_env(), "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stderr
    assert said in " ".join(refused.stderr.split()), refused.stderr
    assert "Traceback" not in refused.stderr
