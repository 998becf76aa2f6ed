"""Issue 5, done-when 3: under `elastic-fifo`, a job grows when GPUs free up and
shrinks when a newcomer arrives, and the training script sees its new world
size and the batch size and learning rate scaled by the linear rule. Real
server and agent processes; each resize is a checkpoint and a restart."""

from __future__ import annotations

from pathlib import Path

from e2e_cluster import Cluster
from live_examples import (
    RESUMED,
    WORLD,
    digits_command,
    history,
    job,
    live_cluster,
    wait_for,
)

from schedulearn.protocol import JobSpec


def _worlds(cluster: Cluster, job_id: int) -> list[tuple[int, int, int, float]]:
    """(world size, global batch, per-worker batch, learning rate) at each (re)start."""
    return [
        (int(w), int(g), int(p), float(lr))
        for w, g, p, lr in WORLD.findall(cluster.log_text(job_id))
    ]


def test_a_job_grows_into_freed_gpus_and_shrinks_for_a_newcomer(tmp_path: Path) -> None:
    with live_cluster(tmp_path, {"big": 4}) as cluster:
        with cluster.client() as c:
            # min_age=2: a job is resized at the earliest 2 s after it (re)started.
            c.set_policy("elastic-fifo:min_age=2")
            blocker = c.submit(JobSpec(name="blocker", command="sleep 6", gpus=3)).ids[0]
            cluster.wait_state(blocker, {"running"})
            elastic = c.submit(
                JobSpec(
                    name="elastic",
                    command=digits_command("--epochs", "500", "--sleep-per-step", "0.02"),
                    min_gpus=1,
                    max_gpus=4,
                    preemptible=True,
                )
            ).ids[0]
        # Only one GPU is free: it starts at its minimum.
        wait_for("a start at world size 1", lambda: _worlds(cluster, elastic), cluster, 60)
        assert _worlds(cluster, elastic)[0] == (1, 16, 16, 0.02)
        assert sum(len(g) for g in (job(cluster, elastic).placement or {}).values()) == 1

        # The blocker ends: its 3 GPUs go to the elastic job, which restarts on 4.
        wait_for("the job to grow", lambda: len(_worlds(cluster, elastic)) >= 2, cluster, 90)
        grown = job(cluster, elastic)
        assert grown.resizes == 1, history(cluster, elastic)
        assert sum(len(g) for g in (grown.placement or {}).values()) == 4
        assert _worlds(cluster, elastic)[1] == (4, 64, 16, 0.08)

        # A newcomer needs 2 GPUs: the elastic job gives 2 back.
        with cluster.client() as c:
            newcomer = c.submit(JobSpec(name="newcomer", command="sleep 3", gpus=2)).ids[0]
        cluster.wait_state(newcomer, {"running", "succeeded"}, timeout=90)
        wait_for("the job to shrink", lambda: len(_worlds(cluster, elastic)) >= 3, cluster, 90)
        assert _worlds(cluster, elastic)[2] == (2, 32, 16, 0.04)
        steps = history(cluster, elastic)
        assert "resizing from 1 to 4 GPUs" in steps and "resizing from 4 to 2 GPUs" in steps, steps
        assert job(cluster, elastic).preemptions == 0  # resized, never sent back to the queue

        # Each restart went on from the checkpoint of the one before, never from scratch.
        log = cluster.log_text(elastic)
        resumed_epochs = [int(e) for e, _s, _k in RESUMED.findall(log)]
        assert len(resumed_epochs) >= 2 and "starting fresh" in log
        assert resumed_epochs == sorted(resumed_epochs) and resumed_epochs[-1] >= 1, log
        assert log.count("starting fresh") == 1
        with cluster.client() as c:
            c.cancel(elastic)
        assert cluster.wait_final([blocker, newcomer], timeout=60)[newcomer].state == "succeeded"
