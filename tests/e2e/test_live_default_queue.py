"""Issue 32, done-when 4 (live): nobody starves silently once queues exist.

On a real server and agent with 4 virtual GPUs and `queue add team-a
--guaranteed 2`:
- guarantees beyond the cluster are refused unless `--overcommit`, and
  `queue list` shows the total promised;
- a job its queue could never start (above the queue's limit) is refused at
  submit with what to change;
- plain jobs (no `--queue`, not preemptible) run: `submit --follow` prints
  their output (it used to hang), and they borrow team-a's idle GPUs;
- when team-a wants its GPUs, the borrowers are requeued (started again),
  with a history line naming who took the GPUs back, shown by `show` too;
- a job that then waits says why, in `show` and in `submit --follow`, and is
  not predicted to start "now".
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from live_examples import history, job, live_cluster

from schedulearn.protocol import JobSpec

GRACE = "2"  # SCHEDULEARN_QUEUE_MIN_RUN_SECONDS


def test_plain_jobs_run_borrow_and_are_requeued_with_a_reason_once_queues_exist(
    tmp_path: Path,
) -> None:
    with live_cluster(tmp_path, {"gpu4": 4}, SCHEDULEARN_QUEUE_MIN_RUN_SECONDS=GRACE) as cluster:
        made = cluster.cli("queue", "add", "team-a", "--guaranteed", "2")
        assert made.returncode == 0, made.stderr
        listed = cluster.cli("queue", "list")
        assert "queues promise 2 of the cluster's 4 GPUs" in listed.stdout, listed.stdout

        # Promises beyond the cluster: refused, unless said on purpose.
        over = cluster.cli("queue", "add", "team-b", "--guaranteed", "3")
        assert over.returncode == 1, over.stdout
        assert "would add up to 5 GPUs and the cluster has 4" in over.stderr, over.stderr
        assert "--overcommit" in over.stderr
        forced = cluster.cli("queue", "add", "team-b", "--guaranteed", "3", "--overcommit")
        assert forced.returncode == 0, forced.stderr
        assert "(overcommitted by 1)" in cluster.cli("queue", "list").stdout
        assert cluster.cli("queue", "rm", "team-b").returncode == 0

        # A job its queue could never start is refused at submit, saying what to change.
        assert cluster.cli("queue", "add", "capped", "--limit", "1").returncode == 0
        refused = cluster.cli("submit", "--queue", "capped", "--gpus", "2", "--", "true")
        assert refused.returncode != 0
        assert "can never start under the current queues" in refused.stderr, refused.stderr
        assert "queue capped may hold at most 1 GPUs" in refused.stderr
        assert "queue set capped --limit 2" in refused.stderr
        assert cluster.cli("queue", "rm", "capped").returncode == 0

        # A plain job runs, and `submit --follow` streams it to the end.
        followed = cluster.cli("submit", "--follow", "--gpus", "1", "--", "echo", "plain-ran")
        assert followed.returncode == 0, followed.stderr
        assert "plain-ran" in followed.stdout

        # Plain jobs fill the cluster: default owns the 2 GPUs no guarantee
        # covers and borrows team-a's 2 idle ones.
        with cluster.client() as c:
            plain = [
                c.submit(JobSpec(name=f"plain{i}", command=["sleep", "600"], gpus=1)).ids[0]
                for i in range(4)
            ]
        for i in plain:
            cluster.wait_state(i, {"running"}, timeout=60)
        listed = json.loads(cluster.cli("queue", "list", "--json").stdout)["items"]
        used = {q["name"]: q["used"] for q in listed}
        assert used == {"default": 4, "team-a": 0}, used

        # team-a wants its guarantee: after the grace, two borrowers are requeued.
        with cluster.client() as c:
            mine = c.submit(
                JobSpec.model_validate(
                    {"name": "a", "command": ["sleep", "600"], "gpus": 2, "queue": "team-a"}
                )
            ).ids[0]
        cluster.wait_state(mine, {"running"}, timeout=60)
        victims = [i for i in plain if job(cluster, i).preemptions == 1]
        assert len(victims) == 2, [history(cluster, i) for i in plain]
        for v in victims:
            steps = history(cluster, v)
            assert (
                f"requeued: team-a took back 1 GPU default had borrowed, for job {mine}; "
                "not preemptible, so it starts again from the beginning"
            ) in steps, steps
        victim = victims[0]
        shown = cluster.cli("show", str(victim))
        assert shown.returncode == 0, shown.stderr
        assert f"team-a took back 1 GPU default had borrowed, for job {mine}" in shown.stdout
        # It waits, and says why; no start "now" is promised.
        assert "waiting because" in shown.stdout and "not while" in shown.stdout, shown.stdout
        predicted = [ln for ln in shown.stdout.splitlines() if "predicted start" in ln]
        assert not any(re.search(r"\bnow\b|ago\)", ln) for ln in predicted), shown.stdout
        row = next(
            line
            for line in cluster.cli("jobs").stdout.splitlines()
            if line.startswith(f"{victim} ")
        )
        assert " now " not in row, row

        # `submit --follow` of a job that must wait says why instead of hanging silently.
        with pytest.raises(subprocess.TimeoutExpired) as waited:
            cluster.cli("submit", "--follow", "--gpus", "1", "--", "echo", "late", timeout=15)
        err = waited.value.stderr or b""  # bytes on a timeout, even with text=True
        said = err.decode() if isinstance(err, bytes) else err
        assert "has not started yet (pending" in said and "not while" in said, said
