"""This release's CLI and agent against an older server: the reverse of test_compat.

The server runs from git history (`test_compat.unpack`): the previous release
(0.1.0, protocol 1: it sends no protocol header and knows no probe) and the
first server of protocol 2 (it refuses this release's version with its range).
Against either, this release's agent registers, runs jobs and follows a cancel,
and this release's CLI submits, lists, shows, prints logs and cancels, each
call spoken at the server's version (`protocol_calls`). A call the server does
not know, or an option it lacks, is refused by the CLI before it is sent,
naming the server's version and what to upgrade.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_cluster import AGENT, FINAL, Cluster
from test_compat import FIRST_PROTOCOL_2, PREVIOUS_RELEASE, unpack

from schedulearn.cli.client import ProtocolTooOld
from schedulearn.cli.localcluster import AgentProcess
from schedulearn.protocol import PROTOCOL_VERSION

OLDER = {1: (PREVIOUS_RELEASE, "the previous release"), 2: (FIRST_PROTOCOL_2, "protocol 2")}


@pytest.fixture(scope="module", params=sorted(OLDER), ids=lambda v: f"protocol-{v}-server")
def older(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, Path]:
    """(the version an older server speaks, its `src` folder from git history)."""
    version: int = request.param
    commit, what = OLDER[version]
    return version, unpack(commit, tmp_path_factory.mktemp(f"protocol-{version}"), what)


@pytest.fixture
def cluster(older: tuple[int, Path], tmp_path: Path) -> Iterator[Cluster]:
    """An older server with one agent of this release (2 virtual GPUs)."""
    _, src = older
    cluster = Cluster(tmp_path, server_env={"PYTHONPATH": str(src)})
    agent = AgentProcess(
        cluster.server.url,
        AGENT,  # the shared agent token: older servers enrol no nodes
        "new1",
        2,
        tmp_path / "agent-new1.log",
        tmp_path / "state-new1",
        extra=["--workdir", str(tmp_path), "--stop-jobs-on-exit"],
    )
    try:
        cluster.start()
        agent.start()
        cluster.agents["new1"] = agent
        yield cluster
    finally:
        agent.stop(timeout=15)
        cluster.server.kill()


def _ok(cluster: Cluster, *args: str) -> str:
    done = cluster.cli(*args)
    assert done.returncode == 0, f"`schedulearn {' '.join(args)}`: {done.stdout}{done.stderr}"
    return done.stdout


def _refused(cluster: Cluster, *args: str) -> str:
    done = cluster.cli(*args)
    assert done.returncode != 0, f"`schedulearn {' '.join(args)}` ran: {done.stdout}"
    return done.stderr


def test_this_cli_and_agent_work_against_an_older_server(
    cluster: Cluster, older: tuple[int, Path]
) -> None:
    version, _ = older
    with cluster.client() as client:
        peer = client.peer()
        # Learnt from the older server itself: a 404 to the probe with no range
        # (protocol 1), or the refusal of this release's version with "1..2".
        assert (peer.newest, peer.speak) == (version, version)

    # This release's agent registers and heartbeats: the node stays healthy.
    cluster.wait_nodes(1, timeout=60)
    assert "new1" in _ok(cluster, "nodes")

    ok = _submitted(_ok(cluster, "submit", "--gpus", "1", "--name", "newer-ok", "--",
                        "sh -c 'echo hello from this release'"))  # fmt: skip
    bad = _submitted(_ok(cluster, "submit", "--gpus", "1", "--name", "newer-bad", "--",
                         "sh -c 'echo about to fail >&2; exit 3'"))  # fmt: skip
    ended = cluster.wait_final([ok, bad], timeout=90)
    assert (ended[ok].state, ended[ok].exit_code) == ("succeeded", 0), ended[ok].message
    assert (ended[bad].state, ended[bad].exit_code) == ("failed", 3), ended[bad].message

    listed = json.loads(_ok(cluster, "jobs", "--json"))
    assert {j["id"]: j["state"] for j in listed["items"]} == {ok: "succeeded", bad: "failed"}
    assert "newer-bad" in _ok(cluster, "show", str(bad))
    assert _ok(cluster, "logs", str(ok)) == "hello from this release\n"

    long = _submitted(_ok(cluster, "submit", "--gpus", "1", "--name", "newer-long", "--",
                          "sleep 600"))  # fmt: skip
    cluster.wait_state(long, {"running"}, timeout=60)
    _ok(cluster, "cancel", str(long))
    assert cluster.wait_state(long, FINAL, timeout=60).state == "cancelled"

    # What the older server does not know is refused here, before it is sent.
    speaks = f"the server speaks protocol {peer.speaks}"
    said = _refused(cluster, "queue", "list")
    assert f"{speaks} and does not know GET /api/v1/queues" in said
    # The queues came in protocol 3; this CLI may speak a later one.
    assert f"needs protocol 3 (this CLI speaks {PROTOCOL_VERSION})" in said
    assert "upgrade the server" in said
    assert f"{speaks} and does not know GET /api/v1/acct" in _refused(cluster, "acct")
    said = _refused(cluster, "submit", "--queue", "research", "--", "true")
    assert f"{speaks} and does not know the field JobSpec.queue" in said
    with cluster.client() as client, pytest.raises(ProtocolTooOld, match="hold"):
        client.hold(ok)
    assert len(json.loads(_ok(cluster, "jobs", "--json"))["items"]) == 3  # nothing submitted

    agent_log = cluster.agents["new1"].log()
    assert "Traceback" not in agent_log
    assert f"the server speaks protocol {peer.speaks}, older than this agent's" in agent_log


def _submitted(output: str) -> int:
    words = output.split()
    assert words[:2] == ["submitted", "job"], output
    return int(words[2])
