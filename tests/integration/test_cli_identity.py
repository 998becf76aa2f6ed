"""`schedulearn user ...` and `schedulearn token ...` against a real server process:
the secret is printed once by `token create` and never by `token list`; a revoked
token and a disabled user are refused by the next command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from schedulearn.cli.localcluster import ServerProcess

ADMIN = "cli-identity-admin"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("cli-identity")
    proc = ServerProcess(f"sqlite:///{work / 'x.db'}", work / "server.log", ADMIN, "cli-agent")
    proc.start()
    try:
        proc.wait_ready(timeout=90)
        yield proc
    finally:
        proc.stop()


def cli(server: ServerProcess, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    env.update(SCHEDULEARN_SERVER=server.url, SCHEDULEARN_TOKEN=token, COLUMNS="200")
    env["SCHEDULEARN_CONFIG"] = str(Path(server.log_path).parent / "no-config.json")
    return subprocess.run(
        [sys.executable, "-m", "schedulearn.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_users_and_tokens_from_the_command_line(server: ServerProcess) -> None:
    added = cli(
        server, ADMIN, "user", "add", "alice", "--unix-account", "al", "--priority-max", "5"
    )
    assert added.returncode == 0, added.stderr
    made = cli(
        server, ADMIN, "token", "create", "--user", "alice", "--expires", "30d", "--name", "laptop"
    )
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("slus_") and secret not in made.stderr
    listed = cli(server, ADMIN, "token", "list", "--all")
    assert listed.returncode == 0 and "laptop" in listed.stdout and "alice" in listed.stdout
    as_json = cli(server, ADMIN, "token", "list", "--all", "--json")
    for text in (listed.stdout, listed.stderr, as_json.stdout):
        assert secret not in text and ADMIN not in text
    token_id = next(t["id"] for t in json.loads(as_json.stdout)["items"] if t["name"] == "laptop")

    me = cli(server, secret, "whoami")
    assert me.returncode == 0 and "alice" in me.stdout
    high = cli(server, secret, "submit", "--gpus", "0", "--priority", "6", "--", "true")
    assert high.returncode == 1 and "-100..5" in high.stderr

    users = json.loads(cli(server, ADMIN, "user", "list", "--json").stdout)["items"]
    assert {u["name"]: u["unix_account"] for u in users}["alice"] == "al"
    assert cli(server, ADMIN, "user", "disable", "alice").returncode == 0
    refused = cli(server, secret, "whoami")
    assert refused.returncode == 1 and "alice is disabled" in refused.stderr
    assert cli(server, ADMIN, "user", "enable", "alice").returncode == 0
    assert cli(server, secret, "whoami").returncode == 0

    revoked = cli(server, ADMIN, "token", "revoke", str(token_id))
    assert revoked.returncode == 0, revoked.stderr
    refused = cli(server, secret, "whoami")
    assert refused.returncode == 1 and "revoked" in refused.stderr
