"""A hostile tenant on a shared node (issue 11), end to end.

Two real unix accounts (`useradd`, removed with `userdel -r` whatever
happens) are two users of a real server; one real agent, started as root
with `--run-jobs-as owner`, enrolled with a join token (so its node
credential sits in `credential.json` in its state directory, and the join
token in its environment), runs their jobs as host processes and as
containers on the real Docker engine.

A keeps a job running with a 0600 file in its home. B's job, as a process
and then as a container, tries what a hostile tenant would: read A's file,
send SIGTERM to A's process and to its process group, read the agent's
state directory, database and credential, and the agent's environment and
command line in /proc. Each attempt must fail, A's job must still run,
`id -u` in each job is its owner's, and the credential is in no job's
output. The same probe run as A (on A's own file and process, with
`kill -0`) succeeds, so B's failures are the accounts at work.

Needs root (to make accounts and start the agent as root), as CI runs.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e_cluster import Cluster
from tenants import Tenant

from dependencies import Dependency, missing, need_root
from schedulearn.cli.localcluster import AgentProcess
from waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
ENGINE_SCRIPT = REPO / "tests" / "integration" / "agent" / "docker_engine.sh"
TEST_IMAGE = "schedulearn-test-busybox:latest"  # what docker_engine.sh builds


@pytest.fixture(autouse=True)
def _as_root() -> None:
    need_root("makes unix accounts and runs an agent as root")


@pytest.fixture
def accounts() -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        name = f"slt{os.getpid() % 100000}{secrets.token_hex(3)}"
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True)
        made.append(name)
        return name

    try:
        yield make
    finally:
        for name in made:
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every account may pass through (pytest's temp folders are root's, 0700),
    for the agent's state: jobs reach their own checkpoint folder in it."""
    base = Path(tempfile.mkdtemp(prefix="schedulearn-tenancy-"))
    base.chmod(0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _root_agent(cluster: Cluster, state: Path, executors: tuple[str, ...]) -> AgentProcess:
    extra = ["--run-jobs-as", "owner", "--stop-jobs-on-exit"]
    for executor in executors:
        extra += ["--executor", executor]
    agent = AgentProcess(
        cluster.server.url, "", "n1", 2, cluster.root / "agent-n1.log", state, extra=extra
    )
    agent.enroll(cluster.server)  # a join token in its environment, never on argv
    agent.start()
    cluster.agents["n1"] = agent
    return agent


def _results(cluster: Cluster, job_id: int) -> dict[str, str]:
    """The job's `key=value` output lines as a dict."""
    out: dict[str, str] = {}
    for line in cluster.log_text(job_id).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out


def _probe(secret: Path, state: Path, agent_pid: int, pid: int, pgid: int, kill: str) -> str:
    """A hostile tenant's attempts, each printing whether it worked (`kill`: the signal
    sent to the other job, `-0` for a harmless control)."""
    return "; ".join(
        [
            'echo "uid=$(id -u)"',
            f"if cat {secret} >/dev/null 2>&1; then echo secret=read; else echo secret=denied; fi",
            f"if ls {state} >/dev/null 2>&1; then echo state=listed; else echo state=denied; fi",
            f"if cat {state}/agent.db >/dev/null 2>&1; then echo db=read; else echo db=denied; fi",
            f"if cat {state}/credential.json >/dev/null 2>&1; then echo credential=read; "
            "else echo credential=denied; fi",
            f"if cat /proc/{agent_pid}/environ >/dev/null 2>&1; then echo agentenv=read; "
            "else echo agentenv=denied; fi",
            f"echo \"agentargv=$(tr '\\0' ' ' < /proc/{agent_pid}/cmdline 2>/dev/null)\"",
            f'echo "kill=$(kill {kill} {pid} 2>&1 && echo sent)"',
            f'echo "killgroup=$(kill {kill} -{pgid} 2>&1 && echo sent)"',
            'echo "env=$(env | grep -c -e AGENT_TOKEN -e JOIN_TOKEN)"',
        ]
    )


def _denied(out: dict[str, str], credential: str, job_output: str) -> None:
    assert out["secret"] == "denied", out
    assert out["state"] == "denied" and out["db"] == "denied", out
    assert out["credential"] == "denied", out
    assert out["agentenv"] == "denied", out
    assert "sent" not in out["kill"] and "sent" not in out["killgroup"], out
    assert out["env"] == "0", out
    assert credential not in job_output


@pytest.mark.docker
def test_another_tenants_job_cannot_reach_a_job_or_the_agent(
    cluster: Cluster, accounts: Callable[[], str], open_dir: Path
) -> None:
    executors: tuple[str, ...] = ("subprocess",)
    if subprocess.run(["bash", str(ENGINE_SCRIPT)], capture_output=True, timeout=600).returncode:
        missing(Dependency.DOCKER, f"{ENGINE_SCRIPT} could not start the engine or build the image")
    executors += ("docker",)
    alice, bob = accounts(), accounts()
    state = open_dir / "state-n1"
    agent = _root_agent(cluster, state, executors)

    def has_accounts() -> bool:
        with cluster.client() as c:
            nodes = {n.name: n for n in c.nodes().items}
        node = nodes.get("n1")
        return node is not None and bob in (node.capabilities.accounts or [])

    wait_until(has_accounts, 60, "n1 to register with both accounts")
    a, b = Tenant(alice, cluster), Tenant(bob, cluster)
    credential = (state / "credential.json").read_text()
    assert agent.popen is not None
    agent_pid = agent.popen.pid

    # A's job: a 0600 file in A's home, its pid where the test can read it, then it runs on.
    a_job = a.submit(
        command='echo "uid=$(id -u)"; echo s3cret > "$HOME/secret"; chmod 600 "$HOME/secret"; '
        'echo $$ > "$SCHEDULEARN_CHECKPOINT_DIR/pid"; echo ready=1; exec sleep 300'
    )
    wait_until(lambda: "ready" in _results(cluster, a_job), 60, "A's job to be ready")
    assert _results(cluster, a_job)["uid"] == str(a.uid)
    a_pid = int((state / "checkpoints" / str(a_job) / "pid").read_text())
    a_pgid = os.getpgid(a_pid)
    secret = a.home / "secret"
    assert secret.stat().st_mode & 0o777 == 0o600 and secret.stat().st_uid == a.uid

    hostile = _probe(secret, state, agent_pid, a_pid, a_pgid, "-TERM")
    as_process = b.submit(command=hostile)
    as_container = b.submit(command=["sh", "-c", hostile], image=TEST_IMAGE)
    for job_id in (as_process, as_container):
        done = cluster.wait_state(job_id, {"succeeded", "failed"}, timeout=120)
        out = _results(cluster, job_id)
        assert out["uid"] == str(b.uid), (job_id, out, done.message)
        _denied(out, credential, cluster.log_text(job_id))
    # On the host B's signals were refused; in the container the pid is not even there.
    assert "not permitted" in _results(cluster, as_process)["kill"]
    assert "not permitted" in _results(cluster, as_process)["killgroup"]
    assert "No such process" in _results(cluster, as_container)["kill"]
    # The agent's command line is readable, as every process's is, and holds no secret.
    assert "schedulearn.agent" in _results(cluster, as_process)["agentargv"]
    # A's job is untouched.
    with cluster.client() as c:
        assert c.job(a_job).state.value == "running"
    os.kill(a_pid, 0)
    assert secret.read_text() == "s3cret\n"

    # The control: A's own probe reaches A's own file and process, so B's denials
    # were the accounts at work; the agent's state and credential stay closed to A too.
    control = a.submit(command=_probe(secret, state, agent_pid, a_pid, a_pgid, "-0"))
    cluster.wait_state(control, {"succeeded", "failed"}, timeout=60)
    out = _results(cluster, control)
    assert out["uid"] == str(a.uid)
    assert out["secret"] == "read" and out["kill"] == "sent" and out["killgroup"] == "sent", out
    assert out["credential"] == "denied" and out["agentenv"] == "denied", out
    assert out["state"] == "denied" and out["db"] == "denied", out
    assert credential not in cluster.log_text(control)

    # On the host: the credential file is root's and 0600, the state folder closed.
    info = (state / "credential.json").stat()
    assert (info.st_uid, info.st_mode & 0o777) == (0, 0o600)
    assert (state.stat().st_uid, state.stat().st_mode & 0o777) == (0, 0o711)
    with cluster.client() as c:
        c.cancel(a_job)
    cluster.wait_state(a_job, {"cancelled"})
