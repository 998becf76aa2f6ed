"""Issue 12, done-when 2 and 4 (live): two queues guaranteed 2 GPUs each on a 4-GPU
cluster; queue A fills all 4; queue B submits; after one scheduling pass plus the
preemption grace B runs on 2 GPUs, and A's preempted job later resumes from its
checkpoint (mid-epoch, the same final weights as A's job that was never stopped). Then
`schedulearn usage` against the same real server reports it. Queues are made
and removed with the admin CLI. Real server and agent processes."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
from e2e_cluster import ADMIN, Cluster
from live_examples import (
    check_turns,
    digest_of,
    digits_command,
    history,
    job,
    wait_for,
)

from schedulearn.protocol import JobSpec

A_ARGS = ("--epochs", "20", "--seed", "3")


@contextlib.contextmanager
def four_gpus(root: Path) -> Iterator[Cluster]:
    """A server (fair-share minimum run time 2 s: A's jobs are past it when B
    arrives) and one agent with 4 virtual GPUs."""
    cluster = Cluster(
        root,
        server_env={"SCHEDULEARN_TICK_SECONDS": "0.5", "SCHEDULEARN_QUEUE_MIN_RUN_SECONDS": "2"},
    )
    try:
        cluster.start()
        # The server listens before its app has loaded; on a busy machine the
        # first request waits for it longer than enrolment's own timeout.
        headers = {"Authorization": f"Bearer {ADMIN}"}
        httpx.get(f"{cluster.server.url}/api/v1/queues", headers=headers, timeout=120)
        cluster.add_agent("gpu4", gpus=4)
        cluster.wait_nodes(1)
        yield cluster
    finally:
        cluster.stop()


def test_a_queue_below_its_guarantee_takes_gpus_back_and_the_victim_resumes(
    tmp_path: Path,
) -> None:
    with four_gpus(tmp_path) as cluster:
        for name in ("A", "B"):
            made = cluster.cli("queue", "add", name, "--guaranteed", "2")
            assert made.returncode == 0, made.stderr
            assert f"{name} uses 0 of its 2 guaranteed GPUs" in made.stdout
        with cluster.client() as c:
            a_ids = [
                c.submit(
                    JobSpec.model_validate(
                        {
                            "name": f"a{i}",
                            "command": digits_command(*A_ARGS, "--sleep-per-step", "0.03"),
                            "gpus": 2,
                            "preemptible": True,
                            "queue": "A",
                        }
                    )
                ).ids[0]
                for i in range(2)
            ]

        def an_epoch_done(job_id: int) -> bool:
            progress = job(cluster, job_id).progress
            return progress is not None and (progress.epoch or 0) >= 1

        for a in a_ids:
            wait_for(f"job {a} to finish an epoch", partial(an_epoch_done, a), cluster, timeout=90)
        listed = json.loads(cluster.cli("queue", "list", "--json").stdout)["items"]
        assert {q["name"]: q["used"] for q in listed} == {"A": 4, "B": 0}
        with cluster.client() as c:
            b_id = c.submit(
                JobSpec.model_validate(
                    {
                        "name": "b",
                        "command": digits_command("--epochs", "2", "--sleep-per-step", "0.02"),
                        "gpus": 2,
                        "preemptible": True,
                        "queue": "B",
                    }
                )
            ).ids[0]
        b = cluster.wait_state(b_id, {"running", "succeeded"}, timeout=60)
        assert b.placement is not None and sum(len(g) for g in b.placement.values()) == 2
        victims = [a for a in a_ids if job(cluster, a).preemptions == 1]
        assert len(victims) == 1, [history(cluster, a) for a in a_ids]
        (victim,) = victims
        jobs = cluster.wait_final([*a_ids, b_id], timeout=240)
        assert all(j.state == "succeeded" for j in jobs.values()), [
            history(cluster, i) for i in jobs
        ]
        # B ran in the victim's gap: the victim started again only after B had begun.
        b_began, victim_began = jobs[b_id].started_at, jobs[victim].started_at
        assert b_began is not None and victim_began is not None
        assert victim_began > b_began
        log = cluster.log_text(victim)
        # It saw the stop once and resumed exactly where it saved, not from
        # scratch: mid-epoch, or at an epoch's end when the stop came there.
        assert check_turns(log, preemptions=1) == 1, (log, history(cluster, victim))
        (untouched,) = set(a_ids) - {victim}
        # World size 2 on 2 GPUs: compared with A's other job, same seed, never stopped.
        assert digest_of(log) == digest_of(cluster.log_text(untouched))
        steps = history(cluster, victim)
        assert "preempted: B took back 2 GPUs A had borrowed, for job" in steps, steps

        # `usage` against this server: GPU-hours, jobs and waits per queue and user.
        by_queue = cluster.cli("usage", "--by", "queue", "--since", "1h", "--json")
        assert by_queue.returncode == 0, by_queue.stderr
        rows = {r["key"]: r for r in json.loads(by_queue.stdout)["rows"]}
        assert set(rows) == {"A", "B"}
        assert (rows["A"]["jobs"], rows["A"]["started"]) == (2, 2)
        assert (rows["B"]["jobs"], rows["B"]["started"]) == (1, 1)
        a_seconds = sum(
            2 * ((j.ended_at or 0) - (j.started_at or 0)) for i, j in jobs.items() if i in a_ids
        )
        # A's GPU-hours cover at least the two jobs' last runs.
        assert rows["A"]["gpu_hours"] * 3600 >= a_seconds - 1.0
        assert rows["B"]["gpu_hours"] > 0 and rows["B"]["mean_wait_seconds"] > 0
        as_csv = cluster.cli("usage", "--by", "user", "--csv")
        assert as_csv.returncode == 0, as_csv.stderr
        table = list(csv.DictReader(io.StringIO(as_csv.stdout)))
        assert [r["user"] for r in table] == ["admin"] and int(table[0]["jobs"]) == 3
        assert float(table[0]["gpu_hours"]) >= rows["A"]["gpu_hours"]
        shown = cluster.cli("usage", "--by", "queue")
        assert shown.returncode == 0 and "GPU-hours" in shown.stdout and "A" in shown.stdout

        removed = cluster.cli("queue", "rm", "B")
        assert removed.returncode == 0 and "removed queue B" in removed.stdout
        missing = cluster.cli("queue", "rm", "B")
        assert missing.returncode == 1 and "no queue B" in missing.stderr
