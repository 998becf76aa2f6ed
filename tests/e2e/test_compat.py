"""The previous release's CLI and agent against this release's server.

Run twice: with the previous release (0.1.0, protocol 1) and with the first
commit of protocol 2 (`OLDER_CLIENTS`). The reverse, this release's CLI and
agent against those servers, is test_compat_older_server.

The previous release's source is taken from git history (`PREVIOUS_RELEASE`)
into a temporary folder, and its `schedulearn` package runs from there
(PYTHONPATH first, this environment's third-party packages behind it):
its agent registers, takes jobs, runs them, reports their exits and
follows a cancel; its CLI submits, lists, shows, prints logs and cancels.
All against a `schedulearn server` process of this checkout.

The previous release sends no protocol header and refuses reply fields
it does not know, so this is what keeps a new server serving protocol 1;
protocol 2's clients send the header and ignore unknown fields.

A clone without that commit (a shallow CI clone) fetches it from its
remote; when that fails the test fails and says what to run. It never
skips: a compatibility check that silently did not run is worse than none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, TypeVar

import pytest
from e2e_cluster import ADMIN, AGENT, FINAL

from previous_source import source_at
from schedulearn.cli.client import Client
from schedulearn.cli.localcluster import AgentProcess, ServerProcess
from schedulearn.protocol import JobPublic

T = TypeVar("T")

# The last commit of Schedulearn 0.1.0 before the upgrade-safe protocol (issue
# 10): its CLI and agent send no protocol header and refuse unknown reply
# fields, so they are the oldest clients this server must serve (protocol 1).
# Move it to the previous release's commit when a release is cut.
PREVIOUS_RELEASE = "fe41f5cdce91ef46219b520d7551b86095a2273b"


def unpack(commit: str, root: Path, what: str = "the previous release") -> Path:
    """The `src` folder of `commit` (`what` it is, for messages), unpacked into `root`."""
    src = source_at(commit, root, what)
    assert (src / "schedulearn" / "protocol.py").is_file()
    return src


# The older clients this server must serve, by the protocol they speak: the
# previous release, and the first commit of protocol 2 (replies tolerate unknown
# fields, but hidden details must not be null and secret_env is unknown to it).
FIRST_PROTOCOL_2 = "89869a0820907ddc2924070624767a784eba6fa6"
OLDER_CLIENTS = {1: PREVIOUS_RELEASE, 2: FIRST_PROTOCOL_2}


@pytest.fixture(scope="module", params=sorted(OLDER_CLIENTS), ids=lambda v: f"protocol-{v}")
def previous_protocol(request: pytest.FixtureRequest) -> int:
    """The protocol of the older release whose CLI and agent a test runs."""
    version: int = request.param
    return version


@pytest.fixture(scope="module")
def previous_src(previous_protocol: int, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """That older release's `src` folder, unpacked from git history."""
    commit = OLDER_CLIENTS[previous_protocol]
    what = f"the last release of protocol {previous_protocol}"
    return unpack(commit, tmp_path_factory.mktemp(f"protocol-{previous_protocol}"), what)


def _old_env(src: Path, root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(src),
        "PYTHONUNBUFFERED": "1",
        "SCHEDULEARN_CONFIG": str(root / "old-cli.json"),
        "COLUMNS": "250",  # wide enough that tables print names whole
    }


class OldCli:
    """The previous release's `schedulearn` command, spoken to a server."""

    def __init__(self, src: Path, root: Path, server: str) -> None:
        self.env = {
            **_old_env(src, root),
            "SCHEDULEARN_SERVER": server,
            "SCHEDULEARN_TOKEN": ADMIN,
        }
        self.cwd = root

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "schedulearn.cli.main", *args],
            capture_output=True, text=True, env=self.env, cwd=self.cwd, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, (
            f"the previous release's `schedulearn {' '.join(args)}` failed "
            f"(exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
        return done.stdout


@pytest.fixture
def cluster(previous_src: Path, tmp_path: Path) -> Iterator[tuple[ServerProcess, AgentProcess]]:
    """This release's server; one agent of the previous release, 2 virtual GPUs."""
    server = ServerProcess(
        f"sqlite:///{tmp_path / 'server.db'}",
        tmp_path / "server.log",
        ADMIN,
        AGENT,
        env={"SCHEDULEARN_HEARTBEAT_SECONDS": "0.5", "SCHEDULEARN_STOP_GRACE_SECONDS": "2"},
    )
    agent = AgentProcess(
        "",  # set below, once the server has its port
        AGENT,
        "old1",
        2,
        tmp_path / "agent-old1.log",
        tmp_path / "state-old1",
        extra=["--workdir", str(tmp_path), "--stop-jobs-on-exit"],
        env={"PYTHONPATH": str(previous_src)},
    )
    agent.args[agent.args.index("--server") + 1] = server.url
    # The previous release has no --run-jobs-as (it runs every job as itself).
    at = agent.args.index("--run-jobs-as")
    del agent.args[at : at + 2]
    try:
        server.start()
        server.wait_ready()
        agent.start()
        yield server, agent
    finally:
        agent.stop(timeout=15)
        server.kill()


def _wait(
    server: ServerProcess,
    agent: AgentProcess,
    check: Callable[[Client], T | Literal[False] | None],
    what: str,
) -> T:
    """The first truthy value of `check` (retried until the deadline)."""
    deadline = time.monotonic() + 90
    with Client(server.url, ADMIN) as client:
        while time.monotonic() < deadline:
            found = check(client)
            if found:
                return found
            assert agent.alive, f"the previous release's agent exited:\n{agent.log()[-3000:]}"
            time.sleep(0.1)
    raise AssertionError(
        f"timed out waiting for {what}\n--- server\n{server.log()[-3000:]}\n"
        f"--- agent (previous release)\n{agent.log()[-3000:]}"
    )


def test_the_test_runs_the_previous_release_and_not_this_checkout(
    previous_src: Path, previous_protocol: int, tmp_path: Path
) -> None:
    where = subprocess.run(
        [sys.executable, "-c", "import schedulearn, schedulearn.protocol as p; "
         "print(schedulearn.__file__); print(getattr(p, 'PROTOCOL_VERSION', 1))"],
        capture_output=True, text=True, env=_old_env(previous_src, tmp_path), check=True,
    )  # fmt: skip
    path, version = where.stdout.split()
    assert Path(path).is_relative_to(previous_src)
    assert int(version) == previous_protocol  # 1: the release before protocol versions


def test_the_previous_releases_agent_and_cli_work_against_this_server(
    cluster: tuple[ServerProcess, AgentProcess], previous_src: Path, tmp_path: Path
) -> None:
    server, agent = cluster
    cli = OldCli(previous_src, tmp_path, server.url)

    # The agent registers (and heartbeats: the node stays healthy).
    _wait(server, agent, lambda c: [n for n in c.nodes().items if n.healthy], "the old agent")
    assert "old1" in cli("nodes")

    # The CLI submits; the agent takes the jobs, runs them and reports their exits.
    ok = _submitted(cli("submit", "--gpus", "1", "--name", "compat-ok", "--",
                        "sh -c 'echo hello from the previous release'"))  # fmt: skip
    bad = _submitted(cli("submit", "--gpus", "1", "--name", "compat-bad", "--",
                         "sh -c 'echo about to fail >&2; exit 3'"))  # fmt: skip
    ended = _wait(
        server,
        agent,
        lambda c: (
            all(c.job(i).state in FINAL for i in (ok, bad)) and {i: c.job(i) for i in (ok, bad)}
        ),
        "the jobs to end",
    )
    assert (ended[ok].state, ended[ok].exit_code) == ("succeeded", 0), ended[ok].message
    assert (ended[bad].state, ended[bad].exit_code) == ("failed", 3), ended[bad].message

    # The CLI lists, shows, and prints the logs (plain and followed).
    listing = cli("jobs")
    assert "compat-ok" in listing and "compat-bad" in listing
    listed = json.loads(cli("jobs", "--json"))
    assert {j["id"]: j["state"] for j in listed["items"]} == {ok: "succeeded", bad: "failed"}
    shown = cli("show", str(bad))
    assert "compat-bad" in shown and "failed" in shown
    shown_json = JobPublic.model_validate_json(cli("show", str(ok), "--json"))
    assert shown_json.placement is not None and list(shown_json.placement) == ["old1"]
    assert cli("logs", str(ok)) == "hello from the previous release\n"
    assert cli("logs", "--follow", str(ok)) == "hello from the previous release\n"

    # A cancel reaches the old agent as a stop order; it stops the job and says so.
    long = _submitted(cli("submit", "--gpus", "1", "--name", "compat-long", "--", "sleep 600"))
    _wait(server, agent, lambda c: c.job(long).state == "running", "the long job to run")
    cli("cancel", str(long))
    cancelled = _wait(
        server,
        agent,
        lambda c: (j := c.job(long)).state in FINAL and j.ended_at is not None and j,
        "the cancelled job to end",
    )
    assert cancelled.state == "cancelled"
    assert "Traceback" not in agent.log()


def _submitted(output: str) -> int:
    words = output.split()
    assert words[:2] == ["submitted", "job"], output
    return int(words[2])
