"""Jobs run as their owners: real unix accounts, a real server, a real agent started as root.

Two accounts are made with `useradd` (removed with `userdel -r` at the end,
whatever happens), each a user of the server with a token of its own. A's
job keeps running with a 0600 secret in A's home; B's job then probes what
a hostile tenant would: A's file, A's processes (`kill -0`), the agent's
state directory and database, A's log and checkpoint directory,
/etc/shadow. The same probe run as A shows each probe can succeed, so a
"denied" is the accounts at work, not a broken probe. Container jobs on the
real Docker engine run as the owner's uid:gid, with no capabilities and
`no-new-privileges`, and see only their checkpoint and progress folders.
A job whose owner has no account on the node waits (the node capability),
and runs once the account exists and the agent has reported it. An agent
started as an ordinary account runs every job as itself.

Needs root (to make accounts and start the agent as root), as CI runs.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_support import AGENT_TOKEN, AdminApi, AgentProc, ServerProc

from dependencies import Dependency, missing, need_root
from schedulearn.agent.executors.process import is_job_shim
from schedulearn.agent.state import StateStore
from waiting import wait_until


@pytest.fixture(autouse=True)
def _as_root() -> None:
    need_root("makes unix accounts and runs an agent as root")


class User:
    """A unix account and the server user of the same name, with its token."""

    def __init__(self, name: str, server_url: str, token: str) -> None:
        self.name = name
        entry = pwd.getpwnam(name)
        self.uid, self.gid, self.home = entry.pw_uid, entry.pw_gid, Path(entry.pw_dir)
        self.http = httpx.Client(
            base_url=server_url + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10.0,
        )

    def submit(self, **spec: object) -> int:
        r = self.http.post("/jobs", json={"gpus": 1, **spec})
        assert r.status_code in (200, 201), r.text
        return int(r.json()["ids"][0])


def _token(api: AdminApi, name: str) -> str:
    r = api.http.post("/tokens", json={"user": name, "role": "user"})
    assert r.status_code in (200, 201), r.text
    return str(r.json()["token"])


@pytest.fixture
def make_account(api: AdminApi) -> Iterator[Callable[..., str]]:
    """Makes unix accounts with unique names; all removed at the end."""
    made: list[str] = []

    def make(create: bool = True) -> str:
        name = f"slr{os.getpid() % 100000}{secrets.token_hex(3)}"
        if create:
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
    """A folder every account may enter (pytest's own temp folders are root's, 0700)."""
    base = Path(tempfile.mkdtemp(prefix="schedulearn-runas-"))
    base.chmod(0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def root_agent(
    server: ServerProc, open_dir: Path, tmp_path: Path
) -> Iterator[Callable[..., AgentProc]]:
    """Starts agents as root that run jobs as their owners; their jobs end with the test."""
    started: list[AgentProc] = []

    def start(name: str = "n1", extra: tuple[str, ...] = ()) -> AgentProc:
        agent = AgentProc(
            server.url,
            name,
            open_dir / f"state-{name}",
            tmp_path / f"agent-{name}.log",
            extra=("--run-jobs-as", "owner", *extra),
        )
        agent.start()
        started.append(agent)
        return agent

    try:
        yield start
    finally:
        for agent in started:
            agent.kill()
        for agent in started:
            if agent.state_dir.exists():
                _end_jobs(agent.state_dir)


def _end_jobs(state_dir: Path) -> None:
    for record in StateStore(state_dir).load_all():
        if record.pid is not None and is_job_shim(record.pid, record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pid, signal.SIGKILL)
        if record.container_id:
            subprocess.run(["docker", "rm", "-f", record.container_id], capture_output=True)


def _registered(api: AdminApi, name: str, account: str | None = None) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        node = api.node(name)
        if node is None:
            return None
        if account is not None and account not in (node["capabilities"]["accounts"] or []):
            return None
        return node

    return dict(wait_until(ready, 30, f"node {name} to register (with account {account})"))


def _results(api: AdminApi, job_id: int) -> dict[str, str]:
    """The job's `key=value` output lines as a dict."""
    out: dict[str, str] = {}
    for text in api.texts(job_id, "stdout"):
        key, sep, value = text.partition("=")
        if sep:
            out[key] = value
    return out


def _probe(secret: Path, state: Path, a_log: Path, a_ckpt: Path, pid: int) -> str:
    """What a hostile tenant tries; each line says whether it worked."""
    return "\n".join(
        [
            'echo "uid=$(id -u)"; echo "gid=$(id -g)"; echo "home=$HOME"; echo "user=$USER"',
            f"if cat {secret} >/dev/null 2>&1; then echo secret=read; else echo secret=denied; fi",
            f"if ls {state} >/dev/null 2>&1; then echo state=listed; else echo state=denied; fi",
            f"if cat {state}/agent.db >/dev/null 2>&1; then echo db=read; else echo db=denied; fi",
            f"if cat {a_log} >/dev/null 2>&1; then echo alog=read; else echo alog=denied; fi",
            f"if ls {a_ckpt} >/dev/null 2>&1; then echo ackpt=read; else echo ackpt=denied; fi",
            "if cat /etc/shadow >/dev/null 2>&1; then echo shadow=read; "
            "else echo shadow=denied; fi",
            f'echo "kill=$(kill -0 {pid} 2>&1 && echo sent)"',
            'if echo x > "$SCHEDULEARN_CHECKPOINT_DIR/mine"; then echo ckpt=written; fi',
            'if echo \'{"at": 1}\' >> "$SCHEDULEARN_PROGRESS_FILE"; then echo progress=written; fi',
        ]
    )


def test_jobs_run_as_their_owners_and_cannot_reach_each_other(
    server: ServerProc,
    api: AdminApi,
    make_account: Callable[..., str],
    root_agent: Callable[..., AgentProc],
) -> None:
    alice_name, bob_name = make_account(), make_account()
    agent = root_agent()
    node = _registered(api, "n1", bob_name)
    accounts = node["capabilities"]["accounts"]
    assert alice_name in accounts and bob_name in accounts and "root" in accounts
    alice = User(alice_name, server.url, _token(api, alice_name))
    bob = User(bob_name, server.url, _token(api, bob_name))
    state = agent.state_dir

    # A's job: a secret in A's home, its pid in its checkpoint dir, then it keeps running.
    a_job = alice.submit(
        command='echo "uid=$(id -u)"; echo s3cret > "$HOME/secret"; chmod 600 "$HOME/secret"; '
        'echo $$ > "$SCHEDULEARN_CHECKPOINT_DIR/pid"; echo ready=1; exec sleep 300'
    )
    wait_until(lambda: "ready" in _results(api, a_job), 30, "A's job to be ready")
    a_ckpt = state / "checkpoints" / str(a_job)
    a_pid = int((a_ckpt / "pid").read_text())
    (a_dir,) = (state / "jobs").glob(f"{a_job}.*")
    assert _results(api, a_job)["uid"] == str(alice.uid)
    secret = alice.home / "secret"
    assert secret.stat().st_uid == alice.uid and secret.stat().st_mode & 0o777 == 0o600
    probe = _probe(secret, state, a_dir / "stdout.log", a_ckpt, a_pid)

    b_job = bob.submit(command=probe)
    api.wait_state(b_job, ["succeeded", "failed"])
    b = _results(api, b_job)
    assert (b["uid"], b["gid"]) == (str(bob.uid), str(bob.gid))
    assert (b["user"], b["home"]) == (bob.name, str(bob.home))
    assert b["secret"] == "denied"
    assert b["state"] == "denied" and b["db"] == "denied"
    assert b["alog"] == "denied" and b["ackpt"] == "denied"
    assert b["shadow"] == "denied"
    assert "not permitted" in b["kill"], b  # EPERM, not "no such process"
    assert b["ckpt"] == "written" and b["progress"] == "written"
    assert api.job(a_job)["state"] == "running"  # A's job is still there to be signalled

    # The same probe as A: what A may reach works, so the denials above are real.
    control = alice.submit(command=probe)
    api.wait_state(control, ["succeeded", "failed"])
    a = _results(api, control)
    assert a["uid"] == str(alice.uid)
    assert a["secret"] == "read" and a["ackpt"] == "read" and a["kill"] == "sent"
    # The agent's state stays closed even to the owner of a job running in it.
    assert a["state"] == "denied" and a["db"] == "denied" and a["alog"] == "denied"

    # On the host: files the agent keeps are its own and closed.
    assert (state.stat().st_mode & 0o777, state.stat().st_uid) == (0o711, 0)
    assert (state / "agent.db").stat().st_mode & 0o777 == 0o600
    assert (a_dir / "stdout.log").stat().st_mode & 0o777 == 0o600
    assert (a_ckpt.stat().st_uid, a_ckpt.stat().st_mode & 0o777) == (alice.uid, 0o700)
    api.cancel(a_job)
    api.wait_state(a_job, ["cancelled"])


def test_a_job_whose_owner_has_no_account_on_the_node_waits_until_it_has_one(
    server: ServerProc,
    api: AdminApi,
    make_account: Callable[..., str],
    root_agent: Callable[..., AgentProc],
) -> None:
    present = make_account()
    root_agent()
    _registered(api, "n1", present)
    carol_name = make_account(create=False)  # a server user with no unix account (yet)
    carol = httpx.Client(
        base_url=server.url + "/api/v1",
        headers={"Authorization": f"Bearer {_token(api, carol_name)}"},
        timeout=10.0,
    )
    # A job of an account the node has runs: the node works.
    other = User(present, server.url, _token(api, present))
    ran = other.submit(command="id -u")
    api.wait_state(ran, ["succeeded"])
    r = carol.post("/jobs", json={"command": "id -u", "gpus": 1})
    assert r.status_code in (200, 201), r.text
    job_id = int(r.json()["ids"][0])
    wait_until(lambda: api.job(job_id)["waiting_reason"], 10, "a waiting reason")
    job = api.job(job_id)
    assert job["state"] == "pending", job
    assert f"no node has unix account {carol_name!r}" in (job["waiting_reason"] or ""), job

    # The account appears; the agent reports it on a heartbeat and the job runs as it.
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", carol_name], check=True)
    try:
        api.wait_state(job_id, ["succeeded"], timeout=60)
        assert api.texts(job_id, "stdout") == [str(pwd.getpwnam(carol_name).pw_uid)]
    finally:
        subprocess.run(["userdel", "-r", "-f", carol_name], capture_output=True)


def test_a_job_run_as_its_owner_gets_the_node_path_and_env_with_its_accounts_home(
    server: ServerProc,
    api: AdminApi,
    make_account: Callable[..., str],
    root_agent: Callable[..., AgentProc],
) -> None:
    """docs/job-environment.md: the job PATH (the agent's interpreter's directory
    first) and `--env` reach an owner's job; HOME, USER, SHELL are its account's."""
    name = make_account()
    agent = root_agent(extra=("--env", "HF_HOME=/data/hf"))
    _registered(api, "n1", name)
    owner = User(name, server.url, _token(api, name))
    job = owner.submit(
        command='echo "path=$PATH"; echo "home=$HOME"; echo "user=$USER"; '
        'echo "shell=$SHELL"; echo "hf=$HF_HOME"'
    )
    api.wait_state(job, ["succeeded"], timeout=60)
    seen = _results(api, job)
    assert seen["path"].split(os.pathsep)[0] == str(Path(sys.executable).parent), seen
    assert (seen["home"], seen["user"], seen["shell"]) == (str(owner.home), name, "/bin/sh")
    assert seen["hf"] == "/data/hf"
    assert "process jobs: PATH=" in agent.log()


@pytest.mark.docker
def test_container_jobs_run_as_their_owner_without_privileges(
    server: ServerProc,
    api: AdminApi,
    docker_image: str,
    make_account: Callable[..., str],
    root_agent: Callable[..., AgentProc],
    open_dir: Path,
) -> None:
    alice_name = make_account()
    root_agent(extra=("--executor", "subprocess", "--executor", "docker"))
    _registered(api, "n1", alice_name)
    alice = User(alice_name, server.url, _token(api, alice_name))
    job = alice.submit(
        image=docker_image,
        command=[
            "sh",
            "-c",
            'echo "uid=$(id -u)"; echo "gid=$(id -g)"; '
            "grep -E '^(CapEff|CapPrm|NoNewPrivs):' /proc/self/status | tr -d '\\t' "
            "| sed 's/:/=/'; "
            f"grep -o '{open_dir}[^ ]*' /proc/self/mountinfo | sed 's/^/mount=/'; "
            'if echo x > "$SCHEDULEARN_CHECKPOINT_DIR/mine"; then echo ckpt=written; fi',
        ],
    )
    api.wait_state(job, ["succeeded", "failed"])
    out = _results(api, job)
    assert (out["uid"], out["gid"]) == (str(alice.uid), str(alice.gid)), api.texts(job)
    assert int(out["CapEff"], 16) == 0 and int(out["CapPrm"], 16) == 0
    assert out["NoNewPrivs"] == "1"
    assert out["ckpt"] == "written"
    # Only the job's checkpoint folder and its progress folder come from the agent's state.
    mounts = [t[len("mount=") :] for t in api.texts(job, "stdout") if t.startswith("mount=")]
    state = open_dir / "state-n1"
    assert len(mounts) == 2, mounts
    checkpoint = str(state / "checkpoints" / str(job))
    (progress,) = [m for m in mounts if m != checkpoint]
    assert progress.startswith(f"{state}/jobs/{job}.") and progress.endswith("/progress"), mounts


def _python_for(account: str) -> list[str] | None:
    """An interpreter `account` can run that imports schedulearn (this one, or the
    system's of the same version when this one lies under a closed home)."""
    path = os.pathsep.join(p for p in sys.path if p)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        cmd = ["runuser", "-u", account, "--", "env", f"PYTHONPATH={path}", python]
        probe = subprocess.run(
            [*cmd, "-c", "import schedulearn.agent.daemon"], capture_output=True, timeout=60
        )
        if probe.returncode == 0:
            return cmd
    return None


def test_an_agent_started_as_an_ordinary_user_runs_every_job_as_itself(
    server: ServerProc,
    api: AdminApi,
    make_account: Callable[..., str],
    open_dir: Path,
    tmp_path: Path,
) -> None:
    agent_account, bob_name = make_account(), make_account()
    python = _python_for(agent_account)
    if python is None:
        missing(
            Dependency.SHARED_PYTHON,
            f"no Python interpreter that account {agent_account} may run imports schedulearn",
        )
    entry = pwd.getpwnam(agent_account)
    state = open_dir / "agent-state"
    state.mkdir()
    os.chown(state, entry.pw_uid, entry.pw_gid)
    base = [*python, "-m", "schedulearn.agent", "--server", server.url, "--token", AGENT_TOKEN]
    base += ["--name", "plain", "--gpus", "2", "--state-dir", str(state)]

    # Asked to run jobs as their owners, an ordinary account refuses to start, saying why.
    refused = subprocess.run([*base, "--run-jobs-as", "owner"], capture_output=True, text=True)
    assert refused.returncode == 2
    assert "needs an agent started as root" in refused.stderr

    log = (tmp_path / "plain-agent.log").open("wb")
    agent = subprocess.Popen(base, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        node = _registered(api, "plain")
        assert node["capabilities"]["accounts"] is None
        bob = User(bob_name, server.url, _token(api, bob_name))
        job = bob.submit(command='echo "uid=$(id -u)"')
        api.wait_state(job, ["succeeded"])
        assert _results(api, job)["uid"] == str(entry.pw_uid)
    finally:
        # runuser does not pass SIGKILL on: end the agent's whole session.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        log.close()
        _end_jobs(state)
