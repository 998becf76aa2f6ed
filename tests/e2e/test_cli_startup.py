"""The quick commands import only what they use (issue 15: CLI start-up).

`bench/cli_startup.py` times `schedulearn --version`, `jobs`, `whoami` and
`simulate --help`; this test guards what makes them quick, structurally
(no timing): run as a user runs them (the console script, a real server on
127.0.0.1), they must not import pydantic (Typer's converters and the wire
models load it: a tenth of a second and more), the server's packages,
httpx, Rich or YAML. `python -X importtime` lists every module a process
imports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_cluster import ADMIN, Cluster

from schedulearn.protocol import JobSpec

FORBIDDEN = {
    "pydantic",
    "pydantic_core",
    "pydantic_settings",
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlmodel",
    "sqlalchemy",
    "httpx",
    "rich",
    "yaml",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cli-startup"))
    try:
        c.start()
        with c.client() as client:  # no node: the jobs stay pending, listed
            client.submit(JobSpec(command=["sleep", "1"], name="first"))
            client.submit(JobSpec(command="echo two", name="second", gpus=2))
        yield c
    finally:
        c.stop()


def imported_by(cluster: Cluster, *args: str) -> tuple[set[str], str]:
    """(top-level modules imported, stdout) of `schedulearn ARGS`, run as a user runs it."""
    script = shutil.which("schedulearn", path=str(Path(sys.executable).parent))
    assert script, "the console script is installed next to the interpreter"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    env |= {
        "SCHEDULEARN_SERVER": cluster.server.url,
        "SCHEDULEARN_TOKEN": ADMIN,
        "SCHEDULEARN_CONFIG": str(cluster.root / "cli.json"),
        "COLUMNS": "200",
    }
    done = subprocess.run(
        [sys.executable, "-X", "importtime", script, *args],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    modules = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "schedulearn" in modules  # -X importtime did list the imports
    return modules, done.stdout


@pytest.mark.parametrize(
    "args",
    [["--version"], ["jobs"], ["jobs", "--mine"], ["whoami"], ["whoami", "--json"],
     ["simulate", "--help"], ["jobs", "--help"]],
)  # fmt: skip
def test_quick_commands_import_no_pydantic_server_httpx_or_rich(
    cluster: Cluster, args: list[str]
) -> None:
    modules, _ = imported_by(cluster, *args)
    assert not FORBIDDEN & modules, sorted(FORBIDDEN & modules)


SIMULATE = [
    "simulate", "--workload", "traces/pollux/workloads/workload-6.csv", "--cluster", "16x4",
    "--policy", "tiresias:mode=artifact", "--round", "60", "--artifact-time",
]  # fmt: skip
# What a simulation does not use (issue 36 item 4); Rich prints its table.
NOT_FOR_SIMULATE = (FORBIDDEN - {"rich"}) | {"multiprocessing", "tomllib"}


def simulate_imports(*extra: str) -> tuple[set[str], str]:
    """(top-level modules imported, stdout) of the issue-36 simulation, as a user runs it."""
    script = shutil.which("schedulearn", path=str(Path(sys.executable).parent))
    assert script
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", script, *SIMULATE, *extra],
        capture_output=True, text=True, env=env | {"COLUMNS": "200"}, cwd=repo, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    modules = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "schedulearn" in modules
    return modules, done.stdout


def test_a_simulation_imports_no_pydantic_httpx_server_or_pool() -> None:
    modules, table = simulate_imports()
    assert not NOT_FOR_SIMULATE & modules, sorted(NOT_FOR_SIMULATE & modules)
    assert "tiresias:mode=artifact" in table and "160" in table  # it ran: 160 jobs
    # The check can fail: an option that needs them (a path given) loads pydantic.
    modules, _ = simulate_imports("--json", "/dev/null")
    assert "pydantic" in modules


def test_the_check_sees_pydantic_where_a_command_loads_it(cluster: Cluster) -> None:
    # `jobs --json` prints the validated wire models: pydantic is imported.
    modules, _ = imported_by(cluster, "jobs", "--json")
    assert "pydantic" in modules


def test_the_quick_commands_answer(cluster: Cluster) -> None:
    _, listing = imported_by(cluster, "jobs")
    lines = listing.splitlines()
    assert lines[0].split()[:2] == ["ID", "ARRAY"]
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], r[2], r[4]) for r in rows] == [
        ("2", "second", "pending"),
        ("1", "first", "pending"),
    ]
    _, me = imported_by(cluster, "whoami")
    assert me.strip() == "admin (admin)"


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("schedulearn jo", "jobs"),
        ("schedulearn jobs --li", "--limit"),
        ("schedulearn nodes dr", "drain"),
    ],
)
def test_shell_completion_still_completes(words: str, expected: str) -> None:
    # Completion parses the command line the same way (resiliently), through
    # the group that converts plain parameters without pydantic.
    script = shutil.which("schedulearn", path=str(Path(sys.executable).parent))
    assert script
    env = {**os.environ, "_SCHEDULEARN_COMPLETE": "complete_bash", "COMP_WORDS": words}
    env["COMP_CWORD"] = str(len(words.split()) - 1)
    done = subprocess.run([script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout.split(), done.stdout
