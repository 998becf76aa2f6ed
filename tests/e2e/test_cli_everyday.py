"""The everyday CLI (issue 15) against a real server and real agents on 127.0.0.1:
listings that keep every id at 80 columns and when piped, `--format`, job
arrays (index in the environment, the `%N` limit), `cancel` reporting each
id and its filters, `submit --follow/--wait` exit codes, `logs --tail
--timestamps` and on a job that has not started, hold/release, update,
resubmit, `nodes drain --reason|resume|rm`, `--version` and a human `show`.

One cluster for the module (two agents of 2 virtual GPUs each); every test
leaves no job running.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_cluster import ADMIN, Cluster, ok, submitted_id

from schedulearn.protocol import JobPublic
from waiting import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cli-everyday"))
    try:
        c.start()
        with c.client() as client:  # the server's first request is slow on a busy machine
            client.nodes()
        c.add_agent("a", gpus=2)
        c.add_agent("b", gpus=2)
        c.wait_nodes(2)
        yield c
    finally:
        c.stop()


@pytest.fixture(autouse=True)
def nothing_left_running(cluster: Cluster) -> Iterator[None]:
    """Each test starts on idle nodes: what one left is cancelled, and ended
    (a stop takes its grace), before the next one begins. Without the wait,
    the next test's first jobs waited on GPUs still being freed, against
    their own timeout (CI, loaded: "needs 2 GPUs on one node; the most free
    on any node is 0")."""
    yield
    with cluster.client() as c:
        left = c.jobs(["pending", "assigned", "running", "preempting"], limit=1000).items
        for job in left:
            c.cancel(job.id)
    cluster.wait_final([job.id for job in left], timeout=120)


def on_terminal(cluster: Cluster, columns: int, *args: str) -> str:
    """The CLI's output on a real pseudo-terminal `columns` wide."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(SCHEDULEARN_SERVER=cluster.server.url, SCHEDULEARN_TOKEN=ADMIN, NO_COLOR="1")
    env["SCHEDULEARN_CONFIG"] = str(cluster.root / "cli.json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedulearn.cli.main", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_jobs_keeps_every_id_at_80_columns_and_in_full_when_piped(cluster: Cluster) -> None:
    long = "python -c 'import time; time.sleep(0)' --a-rather-long-flag " + "x" * 60
    ids = [
        submitted_id(ok(cluster.cli("submit", "--gpus", "0", "--name", f"n{i}" * 12, "--", long)))
        for i in range(4)
    ]
    cluster.wait_final(ids)

    piped = ok(cluster.cli("jobs"))
    for job_id in ids:
        assert re.search(rf"^{job_id}\s", piped.stdout, re.M), piped.stdout
    assert long in piped.stdout  # nothing cut when piped

    screen = on_terminal(cluster, 80, "jobs")
    lines = [ln for ln in screen.splitlines() if ln.strip()]
    assert lines[0].split()[:1] == ["ID"] and "STATE" in lines[0].split()
    assert max(len(ln) for ln in lines) <= 80, screen
    for job_id in ids:
        row = next(ln for ln in lines if ln.startswith(f"{job_id} "))
        assert "succeeded" in row.split(), row
    assert long not in screen  # the command was shortened to fit

    narrow = on_terminal(cluster, 30, "jobs")
    for job_id in ids:
        assert re.search(rf"^{job_id}\s+.*succeeded", narrow, re.M), narrow


def test_format_picks_the_columns_and_names_them_on_a_typo(cluster: Cluster) -> None:
    job_id = submitted_id(ok(cluster.cli("submit", "--gpus", "0", "--wait", "--", "true")))
    shown = ok(cluster.cli("jobs", "--format", "state,id,exit"))
    header, *rows = shown.stdout.splitlines()
    assert header.split() == ["STATE", "ID", "EXIT"]
    assert re.search(rf"^succeeded\s+{job_id}\s+0$", "\n".join(rows), re.M), rows
    bad = cluster.cli("jobs", "--format", "id,colour")
    assert bad.returncode == 2 and "colour" in bad.stderr and "command" in bad.stderr


def test_array_tasks_see_their_index_and_never_run_more_than_the_limit(cluster: Cluster) -> None:
    line = (
        "echo task=$SCHEDULEARN_ARRAY_INDEX of=$SCHEDULEARN_ARRAY_ID "
        "size=$SCHEDULEARN_ARRAY_SIZE; sleep 1"
    )
    done = ok(cluster.cli("submit", "--gpus", "0", "--array", "3-8%2", "--json", "--", line))
    ids = json.loads(done.stdout)["ids"]
    assert len(ids) == 6
    ended = cluster.wait_final(ids)
    array_id = ids[0]
    for index, job_id in zip(range(3, 9), ids, strict=True):
        assert ended[job_id].state == "succeeded", ended[job_id].message
        assert f"task={index} of={array_id} size=6" in cluster.log_text(job_id)
    # Never more than 2 at once: a task's run is [started_at, ended_at] as the
    # server recorded them, and no instant lies inside three of them.
    spans = [(j.started_at or 0.0, j.ended_at or 0.0) for j in ended.values()]
    for start, _ in spans:
        assert sum(1 for s, e in spans if s <= start < e) <= 2, spans
    listed = ok(cluster.cli("jobs", "--format", "id,array"))
    assert re.search(rf"^{ids[2]}\s+{array_id}_5$", listed.stdout, re.M), listed.stdout


def test_cancel_takes_an_array_id_and_reports_each_id(cluster: Cluster) -> None:
    done = ok(cluster.cli("submit", "--gpus", "0", "--array", "0-2", "--json", "--", "sleep 60"))
    ids = json.loads(done.stdout)["ids"]
    other = submitted_id(ok(cluster.cli("submit", "--gpus", "0", "--", "sleep", "60")))
    mixed = cluster.cli("cancel", str(other), "999999", f"{ids[0]}_7")
    assert mixed.returncode == 1
    assert f"job {other}: cancelled" in mixed.stdout
    assert "999999" in mixed.stderr and f"{ids[0]}_7" in mixed.stderr
    whole = ok(cluster.cli("cancel", "--array", str(ids[0])))
    for job_id in ids:
        assert f"job {job_id}: cancelled" in whole.stdout


def test_cancel_by_name_and_mine(cluster: Cluster) -> None:
    keep = submitted_id(
        ok(cluster.cli("submit", "--gpus", "0", "--name", "keep", "--", "sleep 60"))
    )
    drop = [
        submitted_id(ok(cluster.cli("submit", "--gpus", "0", "--name", "drop", "--", "sleep 60")))
        for _ in range(2)
    ]
    by_name = ok(cluster.cli("cancel", "--name", "drop"))
    assert sorted(int(i) for i in re.findall(r"job (\d+): cancelled", by_name.stdout)) == drop
    with cluster.client() as c:
        assert c.job(keep).state != "cancelled"
    mine = ok(cluster.cli("jobs", "--mine", "--format", "id"))
    assert str(keep) in mine.stdout.split()
    ok(cluster.cli("cancel", "--mine"))
    with cluster.client() as c:
        assert c.job(keep).state == "cancelled"


def test_submit_follow_exits_with_the_jobs_code_and_wait_too(cluster: Cluster) -> None:
    followed = cluster.cli("submit", "--gpus", "0", "--follow", "--", "echo hello-follow; exit 3")
    assert followed.returncode == 3, followed.stderr
    assert "hello-follow" in followed.stdout
    waited = cluster.cli("submit", "--gpus", "0", "--wait", "--", "true")
    assert waited.returncode == 0, waited.stderr
    failed = cluster.cli("submit", "--gpus", "0", "--wait", "--", "exit 5")
    assert failed.returncode == 5, failed.stderr


def test_logs_tail_and_timestamps(cluster: Cluster) -> None:
    job_id = submitted_id(
        ok(
            cluster.cli(
                "submit", "--gpus", "0", "--wait", "--", "for i in 1 2 3 4 5; do echo L$i; done"
            )
        )
    )
    tail = ok(cluster.cli("logs", str(job_id), "--tail", "2"))
    assert tail.stdout.split() == ["L4", "L5"]
    stamped = ok(cluster.cli("logs", str(job_id), "--timestamps", "-n", "1"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d L5\n", stamped.stdout), stamped.stdout


def _fill(cluster: Cluster) -> list[int]:
    """Both nodes busy: one 2-GPU sleeper on each."""
    ids = [submitted_id(ok(cluster.cli("submit", "--gpus", "2", "--", "sleep 120"))) for _ in "ab"]
    for job_id in ids:
        cluster.wait_state(job_id, {"running"})
    return ids


def test_hold_release_update_and_logs_of_a_job_that_has_not_started(cluster: Cluster) -> None:
    blockers = _fill(cluster)
    waiting = submitted_id(ok(cluster.cli("submit", "--gpus", "1", "--", "echo ran")))
    note = ok(cluster.cli("logs", str(waiting)))
    assert f"job {waiting} has not started yet (pending" in note.stderr
    assert "expected to start" in note.stderr or "no start time" in note.stderr

    ok(cluster.cli("hold", str(waiting)))
    assert "priority 7" in ok(cluster.cli("update", str(waiting), "--priority", "7")).stdout
    ok(cluster.cli("cancel", *map(str, blockers)))
    cluster.settle()
    with cluster.client() as c:
        held = c.job(waiting)
    assert held.state == "pending" and held.priority == 7
    assert "held" in (held.waiting_reason or "")
    shown = ok(cluster.cli("show", str(waiting))).stdout
    assert "held" in shown and "[" not in shown and "{" not in shown

    ok(cluster.cli("release", str(waiting)))
    assert cluster.wait_final([waiting])[waiting].state == "succeeded"
    refused = cluster.cli("hold", str(waiting))
    assert refused.returncode == 1 and "only a pending job" in refused.stderr

    again = submitted_id(ok(cluster.cli("resubmit", str(waiting))))
    assert again != waiting
    assert cluster.wait_final([again])[again].state == "succeeded"
    assert "ran" in cluster.log_text(again)


def test_drain_resume_and_remove_a_node(cluster: Cluster) -> None:
    said = ok(cluster.cli("nodes", "drain", "a", "--reason", "fan noise")).stdout
    assert said.startswith("node a drained (fan noise): it takes no new job"), said
    listing = ok(cluster.cli("nodes")).stdout
    assert re.search(r"^a\s+drained\s.*\sfan noise\s*$", listing, re.M), listing
    assert re.search(r"^NODE\s.*\sREASON\s*$", listing, re.M), listing
    assert re.search(r"^b\s+up\s.*\s-\s*$", listing, re.M), listing
    shown = {n["name"]: n for n in json.loads(ok(cluster.cli("nodes", "--json")).stdout)["items"]}
    assert (shown["a"]["drain_reason"], shown["b"]["drain_reason"]) == ("fan noise", "")
    ids = [
        submitted_id(ok(cluster.cli("submit", "--gpus", "1", "--", "sleep 60"))) for _ in range(3)
    ]
    running = [cluster.wait_state(i, {"running"}) for i in ids[:2]]
    assert all(set((j.placement or {}).keys()) == {"b"} for j in running)
    cluster.settle()
    with cluster.client() as c:
        third: JobPublic = c.job(ids[2])
    assert third.state == "pending", third
    assert "drained" in (third.waiting_reason or ""), third.waiting_reason

    ok(cluster.cli("nodes", "resume", "a"))
    # Resuming clears the reason: it was the drain's.
    assert not re.search(r"fan noise", ok(cluster.cli("nodes")).stdout)
    assert set((cluster.wait_state(ids[2], {"running"}).placement or {}).keys()) == {"a"}
    ok(cluster.cli("cancel", *map(str, ids)))

    cluster.agents["b"].stop(timeout=15)
    with cluster.client() as c:
        wait_until(
            lambda: [n.name for n in c.nodes().items if not n.healthy],
            30,
            "node b to be down",
            until=lambda down: "b" in down,
        )
    ok(cluster.cli("nodes", "rm", "b"))
    assert not re.search(r"^b\s", ok(cluster.cli("nodes")).stdout, re.M)


def test_version_and_a_human_show(cluster: Cluster) -> None:
    version = ok(cluster.cli("--version")).stdout
    assert re.fullmatch(r"schedulearn \d+\.\d+\.\d+\S*\n", version), version
    job_id = submitted_id(
        ok(cluster.cli("submit", "--gpus", "0", "--wait", "-e", "A=1", "--", "echo", "hi"))
    )
    shown = ok(cluster.cli("show", str(job_id))).stdout
    assert shown.startswith(f"job {job_id} of ")
    assert re.search(r"^\s+state\s+succeeded$", shown, re.M)
    assert re.search(r"^\s+command\s+echo hi$", shown, re.M)
    assert re.search(r"^\s+env\s+A=1$", shown, re.M)
    assert "[" not in shown and "{" not in shown
    assert json.loads(ok(cluster.cli("show", str(job_id), "--json")).stdout)["id"] == job_id


def test_a_bad_array_spec_says_how_to_write_one(cluster: Cluster, tmp_path: Path) -> None:
    bad = cluster.cli("submit", "--array", "9-3", "--", "true")
    assert bad.returncode == 2 and "FIRST-LAST" in bad.stderr
