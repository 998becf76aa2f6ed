"""The visibility model end to end: a real server and agent, the `schedulearn` CLI
as Alice (the owner) and as Bob (another user).

Bob's `show`, `jobs` and `logs` say that the details of Alice's job are
hidden and whose it is, and print none of them. Alice's secret env value
reaches her job (it checks the value and prints its hash) but no reply,
no log line and no file but the server's database.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_cluster import ADMIN, Cluster

SECRET = "s3cret-e2e-7c1a"
FROM_SHELL = "from-shell-secret-92bd"  # given as `--secret-env FROM_SHELL`
WANDB = "wandb-visible-to-owner-5521"
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()
SHELL_DIGEST = hashlib.sha256(FROM_SHELL.encode()).hexdigest()
# The job proves it sees the values by printing their hashes (the command,
# shown to its owner, must not hold the values themselves).
SCRIPT = (
    'printf %s "$TOKEN" | sha256sum; printf %s "$FROM_SHELL" | sha256sum; echo token-ok; '
    'echo "wandb=$WANDB_API_KEY"'
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        c.start()
        c.add_agent("a", gpus=2)
        c.wait_nodes(1)
        yield c
    finally:
        c.stop()


def _cli(
    c: Cluster, token: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full |= {"SCHEDULEARN_SERVER": c.server.url, "SCHEDULEARN_TOKEN": token, "COLUMNS": "200"}
    full["SCHEDULEARN_CONFIG"] = str(c.root / "cli.json")
    return subprocess.run(
        [sys.executable, "-m", "schedulearn.cli.main", *args],
        capture_output=True, text=True, env=full, timeout=60,
    )  # fmt: skip


def _token(c: Cluster, user: str) -> str:
    made = _cli(c, ADMIN, "token", "create", "--user", user)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def test_another_user_sees_no_details_and_a_secret_reaches_only_the_job(
    cluster: Cluster,
) -> None:
    alice, bob = _token(cluster, "alice"), _token(cluster, "bob")
    submitted = _cli(
        cluster, alice, "submit", "--json", "--name", "private-run", "--gpus", "1",
        "--env", f"WANDB_API_KEY={WANDB}", "--secret-env", f"TOKEN={SECRET}",
        "--secret-env", "FROM_SHELL", "--", "sh", "-c", SCRIPT,
        env={"FROM_SHELL": FROM_SHELL},
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    assert SECRET not in submitted.stdout and FROM_SHELL not in submitted.stdout
    job_id = json.loads(submitted.stdout)["ids"][0]
    done = cluster.wait_final([job_id])[job_id]
    assert done.state == "succeeded", (done.message, cluster.logs())

    # Alice: her job's output shows the job saw both secrets, and their hash only.
    logs = _cli(cluster, alice, "logs", str(job_id))
    assert logs.returncode == 0, logs.stderr
    assert "token-ok" in logs.stdout and DIGEST in logs.stdout and SHELL_DIGEST in logs.stdout
    assert f"wandb={WANDB}" in logs.stdout
    shown = _cli(cluster, alice, "show", "--json", str(job_id))
    job = json.loads(shown.stdout)
    assert job["command"] == ["sh", "-c", SCRIPT] and job["env"] == {"WANDB_API_KEY": WANDB}
    assert job["secret_env_keys"] == ["FROM_SHELL", "TOKEN"] and not job["details_hidden"]
    table = _cli(cluster, alice, "show", str(job_id))
    assert "FROM_SHELL, TOKEN (values never shown)" in table.stdout

    # Bob: the queue facts, and words saying the rest is hidden and whose it is.
    note = f"job {job_id} belongs to alice"
    shown = _cli(cluster, bob, "show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    assert "private-run" in shown.stdout and "succeeded" in shown.stdout
    assert "hidden" in shown.stdout and note in shown.stdout
    as_json = json.loads(_cli(cluster, bob, "show", "--json", str(job_id)).stdout)
    assert as_json["details_hidden"] and as_json["user"] == "alice"
    assert as_json["command"] is None and as_json["env"] is None and as_json["workdir"] is None
    listing = _cli(cluster, bob, "jobs")
    assert "private-run" in listing.stdout and "(hidden)" in listing.stdout
    for follow in ((), ("-f",)):
        refused = _cli(cluster, bob, "logs", *follow, str(job_id))
        assert refused.returncode == 1 and note in refused.stderr, refused.stderr
        assert "token-ok" not in refused.stdout + refused.stderr
    outputs = [
        shown.stdout,
        json.dumps(as_json),
        listing.stdout,
        _cli(cluster, bob, "jobs", "--json").stdout,
    ]
    for text in outputs:
        assert "sha256sum" not in text and WANDB not in text and "token-ok" not in text

    # The secret values: in no reply to anyone, in no log, in no file but the database.
    replies = [
        _cli(cluster, who, *args).stdout
        for who in (alice, bob, ADMIN)
        for args in (("show", "--json", str(job_id)), ("jobs", "--json"), ("logs", str(job_id)))
    ]
    replies.append(_cli(cluster, alice, "logs", "-f", str(job_id)).stdout)
    for text in [*replies, *outputs, cluster.logs()]:
        assert SECRET not in text and FROM_SHELL not in text
    assert any(DIGEST in text for text in replies)  # the search sees the job's output
    holding = [
        p.relative_to(cluster.root)
        for p in cluster.root.rglob("*")
        if p.is_file()
        and (SECRET.encode() in p.read_bytes() or FROM_SHELL.encode() in p.read_bytes())
    ]
    assert all(p.name.startswith("server.db") for p in holding), holding
