"""Queue trees from the command line (issue 32 item 6), against a real server process
and one agent with 8 virtual GPUs: `queue add --parent` builds a parent with two
children, `queue list` prints them as a tree at 80 columns with the parent's part
promised to its children and the total over root queues only; a tree the core
refuses (a child promised more than its parent has left, an unknown parent) is
refused with the core's message and nothing is stored; a parent with children
cannot be removed; `queue set --no-parent` / `--parent` moves a queue, and moving
one out of its parent counts against the cluster's GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from schedulearn.cli.localcluster import AgentProcess, ServerProcess
from waiting import wait_until

ADMIN = "cli-tree-admin"
AGENT = "cli-tree-agent"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("cli-queue-tree")
    proc = ServerProcess(f"sqlite:///{work / 'x.db'}", work / "server.log", ADMIN, AGENT)
    agent = AgentProcess(proc.url, "", "gpu8", 8, work / "gpu8.log", work / "gpu8-state")
    proc.start()
    try:
        proc.wait_ready(timeout=90)
        agent.enroll(proc)
        agent.start()
        # The overcommit rule counts the registered GPUs: wait for the node's 8.
        wait_until(
            lambda: queue_list(proc)["cluster_gpus"],
            60,
            "8 registered GPUs",
            until=lambda n: n == 8,
        )
        yield proc
    finally:
        agent.stop()
        proc.stop()


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    # 80 columns: the tree must read in a plain terminal.
    env.update(SCHEDULEARN_SERVER=server.url, SCHEDULEARN_TOKEN=ADMIN, COLUMNS="80")
    env["SCHEDULEARN_CONFIG"] = str(Path(server.log_path).parent / "no-config.json")
    return subprocess.run(
        [sys.executable, "-m", "schedulearn.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok(server: ServerProcess, *args: str) -> str:
    done = cli(server, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def refused(server: ServerProcess, *args: str) -> str:
    """The command's error (it must fail), on one line (Rich wraps it at 80 columns)."""
    done = cli(server, *args)
    assert done.returncode == 1, (done.stdout, done.stderr)
    return " ".join(done.stderr.split())


def queue_list(server: ServerProcess) -> dict[str, Any]:
    listing: dict[str, Any] = json.loads(ok(server, "queue", "list", "--json"))
    return listing


def stored(server: ServerProcess) -> dict[str, tuple[str | None, int]]:
    """Each declared queue: (parent, guaranteed GPUs it declares)."""
    return {
        q["name"]: (q.get("parent"), sum(q["guaranteed"].values()))
        for q in queue_list(server)["items"]
        if q["declared"]
    }


def names_in_table(listed: str) -> list[str]:
    """The queue column of `queue list`'s table, with its indentation beyond the
    table's own padding (the header's)."""
    header, *rows = listed.splitlines()
    pad = len(header) - len(header.lstrip())
    out = []
    for row in rows:
        if not row.strip() or row.startswith("queues promise"):
            break
        out.append(row[pad : len(row) - len(row.lstrip())] + row.split()[0])
    return out


def test_a_queue_tree_from_the_command_line(server: ServerProcess) -> None:
    ok(server, "queue", "add", "research", "--guaranteed", "6")
    made = ok(server, "queue", "add", "ml-vision", "--parent", "research", "--guaranteed", "4")
    assert "added queue ml-vision (under research)" in made
    ok(server, "queue", "add", "ml-nlp", "--parent", "research", "--guaranteed", "2")
    ok(server, "queue", "add", "other", "--guaranteed", "2")
    before = stored(server)
    assert before == {
        "research": (None, 6),
        "ml-vision": ("research", 4),
        "ml-nlp": ("research", 2),
        "other": (None, 2),
    }

    listed = ok(server, "queue", "list")
    assert max(len(line) for line in listed.splitlines()) <= 80, listed
    # Children indented under their parent, in name order; roots in name order.
    assert names_in_table(listed) == ["other", "research", "  ml-nlp", "  ml-vision"], listed
    # The total promised counts the root queues only: 6 + 2, not 6 + 4 + 2 + 2.
    assert "queues promise 8 of the cluster's 8 GPUs" in listed
    assert "research: its children are promised 6 of its 6 guaranteed GPUs" in listed

    # A child promised more than its parent has left: the core's message, nothing stored.
    why = refused(server, "queue", "add", "ml-speech", "--parent", "research", "--guaranteed", "1")
    assert (
        "the children of queue 'research' are guaranteed 7 GPUs together, more than its 6; "
        "raise 'research''s guarantee or lower theirs" in why
    ), why
    why = refused(server, "queue", "set", "ml-nlp", "--guaranteed", "3")
    assert "guaranteed 7 GPUs together, more than its 6" in why, why
    # A parent lowered below what its children are promised.
    why = refused(server, "queue", "set", "research", "--guaranteed", "5")
    assert "guaranteed 6 GPUs together, more than its 5" in why, why
    # An unknown parent, a parent with a limit, the default queue in a tree.
    why = refused(server, "queue", "add", "x", "--parent", "nope", "--guaranteed", "1")
    assert "its parent 'nope' is not a queue; create the parent first or give no parent" in why
    why = refused(server, "queue", "set", "research", "--limit", "7")
    assert "has children and a limit" in why, why
    why = refused(server, "queue", "add", "default", "--parent", "research")
    assert "stays out of queue trees" in why, why
    why = refused(server, "queue", "set", "research", "--parent", "ml-nlp")
    assert "its parents form a loop" in why, why
    assert stored(server) == before

    # The refusal is a 422 with the core's message on the wire too.
    r = httpx.post(
        f"{server.url}/api/v1/queues",
        headers={"Authorization": f"Bearer {ADMIN}"},
        json={"name": "ml-speech", "parent": "research", "guaranteed": {"": 1}},
        timeout=30,
    )
    assert r.status_code == 422 and "more than its 6" in r.json()["error"], r.text

    # A parent with children cannot be removed; its children can.
    why = refused(server, "queue", "rm", "research")
    assert "queue research is the parent of ml-nlp, ml-vision" in why, why
    assert "research" in stored(server)

    # Moving a child out makes its guarantee count against the cluster: 10 of 8.
    why = refused(server, "queue", "set", "ml-nlp", "--no-parent")
    assert "the guarantees would add up to 10 GPUs and the cluster has 8" in why, why
    ok(server, "queue", "set", "ml-nlp", "--no-parent", "--overcommit")
    assert stored(server)["ml-nlp"] == (None, 2)
    assert queue_list(server)["promised"] == 10
    ok(server, "queue", "set", "ml-nlp", "--parent", "research")
    assert stored(server) == before
    # Raising a parent beyond the cluster is the same overcommit as a flat queue's.
    why = refused(server, "queue", "set", "research", "--guaranteed", "7")
    assert "would add up to 9 GPUs" in why, why

    ok(server, "queue", "rm", "ml-vision")
    ok(server, "queue", "rm", "ml-nlp")
    ok(server, "queue", "rm", "research")
    assert stored(server) == {"other": (None, 2)}
