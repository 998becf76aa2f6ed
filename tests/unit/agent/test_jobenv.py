"""The job environment contract's pieces (agent.jobenv, launchers.job_env): the
default PATH, the checks of `--env` and `--path`, the order of the layers, and
the startup lines. The same contract end to end, with a real agent started by
its venv path: tests/integration/agent/test_job_environment.py."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from schedulearn.agent import jobenv
from schedulearn.agent.jobenv import JobEnvError, JobPython
from schedulearn.agent.launchers import plan_launch
from schedulearn.protocol import Assignment


def test_the_default_path_starts_with_the_interpreters_directory_once() -> None:
    path = jobenv.default_path("/opt/venv/bin/python", "/usr/bin:/opt/venv/bin:/bin")
    assert path == "/opt/venv/bin:/usr/bin:/bin"
    # No PATH at all: the system default after the interpreter's directory.
    assert jobenv.default_path("/opt/venv/bin/python", None) == f"/opt/venv/bin:{os.defpath}"
    # --path replaces it, as given.
    agent = {"PATH": "/usr/bin"}
    assert jobenv.job_path("/a:/b", "/opt/venv/bin/python", agent) == "/a:/b"
    assert jobenv.job_path(None, "/opt/venv/bin/python", agent) == "/opt/venv/bin:/usr/bin"
    assert jobenv.job_path(None, "/v/bin/python", {}) == f"/v/bin:{os.defpath}"


def test_the_interpreters_directory_is_not_resolved_through_its_symlink() -> None:
    # A venv's python is a symlink to the base interpreter; its directory is the venv's.
    assert jobenv.job_path(None).split(os.pathsep)[0] == str(Path(sys.executable).parent)


def test_env_options_parse_and_keep_equals_signs_in_values() -> None:
    assert jobenv.parse_env(["A=1", "URL=x=y", "EMPTY="]) == {"A": "1", "URL": "x=y", "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("FOO", "has no '='; write it as KEY=VALUE"),
        ("=x", "'' is not a variable name"),
        ("A-B=1", "'A-B' is not a variable name"),
        ("PATH=/x", "give the job PATH with --path DIRS"),
        ("SCHEDULEARN_TOKEN=1", "--env cannot set SCHEDULEARN_TOKEN"),
        ("NODE_RANK=1", "--env cannot set NODE_RANK"),
        ("A=x\0y", "NUL byte"),
    ],
)
def test_a_bad_env_option_says_what_to_change(text: str, said: str) -> None:
    with pytest.raises(JobEnvError, match=said.replace("(", r"\(")):
        jobenv.parse_env([text])


@pytest.mark.parametrize("text", ["", "/a::/b", "/a:", "rel/bin", "/a:."])
def test_a_path_needs_absolute_directories(text: str) -> None:
    with pytest.raises(JobEnvError, match="absolute directories"):
        jobenv.check_path(text)
    assert jobenv.check_path("/opt/venv/bin:/usr/bin") == "/opt/venv/bin:/usr/bin"


def test_the_base_env_takes_only_the_allowlist_of_the_agents_env_and_sets_path() -> None:
    agent = {
        "PATH": "/x",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "LC_TIME": "en_GB.UTF-8",
        "TZ": "UTC",
        "SCHEDULEARN_AGENT_TOKEN": "secret",
        "AWS_SECRET_ACCESS_KEY": "key",
        "LD_PRELOAD": "/tmp/evil.so",
        "PYTHONPATH": "/agent/src",
    }
    assert jobenv.base_env("/v/bin:/x", agent) == {
        "PATH": "/v/bin:/x",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "LC_TIME": "en_GB.UTF-8",
        "TZ": "UTC",
    }


def test_layers_env_option_under_the_jobs_env_under_schedulearns() -> None:
    job = Assignment(
        job_id=4,
        attempt=1,
        command="true",
        gpus=[1],
        env={"SHARED": "job", "CUDA_VISIBLE_DEVICES": "0,1,2"},
    )
    node = {"SHARED": "node", "HF_HOME": "/data/hf"}
    env = plan_launch(job, "/ckpt", node_env=node).env
    assert (env["SHARED"], env["HF_HOME"], env["CUDA_VISIBLE_DEVICES"]) == ("job", "/data/hf", "1")
    # In a container too: the same layers (PATH is not among them: the image's).
    boxed = plan_launch(job, "/ckpt", in_container=True, node_env=node).env
    assert (boxed["SHARED"], boxed["HF_HOME"]) == ("job", "/data/hf")
    assert "PATH" not in boxed


def test_the_python_on_a_path_is_found_and_asked_its_version() -> None:
    here = jobenv.find_python(str(Path(sys.executable).parent))
    assert here.path == str(Path(sys.executable).parent / "python")
    assert here.version == sys.version.split()[0]
    assert here.has_schedulearn
    assert jobenv.find_python("/nonexistent-dir").path is None


def test_the_startup_lines_name_the_python_the_path_and_the_env_names() -> None:
    python = JobPython("/v/bin/python", "3.12.1", has_schedulearn=False)
    lines = jobenv.describe(
        "/v/bin:/usr/bin",
        {"B": "2", "A": "1"},
        path_given=True,
        processes=True,
        containers=True,
        jobs_as_owners=False,
        python=python,
    )
    assert lines == [
        "process jobs: python is /v/bin/python (Python 3.12.1, without schedulearn: jobs "
        "that import schedulearn.runtime fail)",
        "process jobs: PATH=/v/bin:/usr/bin (from --path)",
        "container jobs: PATH and python are their image's",
        "every job also gets --env A, B",
    ]
    missing = jobenv.describe(
        "/x",
        {},
        False,
        processes=True,
        containers=False,
        jobs_as_owners=False,
        python=JobPython(None),
    )
    assert missing[0] == "process jobs: no `python` or `python3` on the job PATH"


def test_a_directory_closed_to_other_users_is_named_for_jobs_run_as_owners() -> None:
    # Not under pytest's tmp_path: its parent is closed to other users itself.
    with tempfile.TemporaryDirectory() as top:
        Path(top).chmod(0o755)
        _closed_directory_named(Path(top))


def _closed_directory_named(top: Path) -> None:
    closed = top / "home"
    bin_dir = closed / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").touch()
    closed.chmod(0o700)
    assert jobenv.closed_to_others(str(bin_dir / "python")) == str(closed)
    python = JobPython(str(bin_dir / "python"), "3.12.1", has_schedulearn=True)
    said = jobenv.describe(
        str(bin_dir),
        {},
        False,
        processes=True,
        containers=False,
        jobs_as_owners=True,
        python=python,
    )
    assert f"process jobs run as their owners cannot enter {closed}" in said[-1]
    closed.chmod(0o711)
    assert jobenv.closed_to_others(str(bin_dir / "python")) is None
    # A venv's python in an open directory, linking to an interpreter behind a closed one.
    venv_bin = top / "open" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(bin_dir / "python")
    closed.chmod(0o700)
    assert jobenv.closed_to_others(str(venv_bin / "python")) == str(closed)
    # Not run as owners: nothing to say.
    said = jobenv.describe(
        str(venv_bin),
        {},
        False,
        processes=True,
        containers=False,
        jobs_as_owners=False,
        python=python,
    )
    assert not any("owners" in line for line in said)
