"""A preemption stops one job, however long its victim takes to exit.

A victim saves its state and exits in its own time (seconds, for a real
checkpoint); the scheduler passes every tick meanwhile. Each of those
passes must see the preemption as made, its victim's GPUs as coming free
for the job it was made for, and not stop a second job for it. Real
server and agent processes; plain tiresias (no queues) on two GPUs."""

from __future__ import annotations

import time
from pathlib import Path

from live_examples import history, job, live_cluster, wait_for

from schedulearn.protocol import JobSpec

# Saves for 3 s when asked to stop (SIGTERM), six ticks of the server's 0.5 s.
SLOW_TO_STOP = "trap 'sleep 3; exit 0' TERM; while :; do sleep 0.1; done"


def test_a_victim_slow_to_exit_is_the_only_job_stopped_for_a_newcomer(tmp_path: Path) -> None:
    with live_cluster(tmp_path, {"pair": 2}) as cluster:
        with cluster.client() as c:
            # Queue 0 ends at 1 GPU-second: the long jobs drop to queue 1 at
            # once, and a newcomer (queue 0) may preempt one of them. No
            # starvation guard: a victim waiting long on a loaded machine
            # must not be promoted and preempt the other long job in turn.
            c.set_policy("tiresias:threshold=1:starvation_factor=0")
            long = [
                c.submit(
                    JobSpec(name=f"long{i}", command=SLOW_TO_STOP, gpus=1, preemptible=True)
                ).ids[0]
                for i in range(2)
            ]
        began = [cluster.wait_state(i, {"running"}, timeout=60).started_at or 0.0 for i in long]
        wait_for(
            "both long jobs past queue 0",
            lambda: time.time() > max(began) + 2 or None,
            cluster,
            timeout=60,
        )
        with cluster.client() as c:
            short = c.submit(JobSpec(name="short", command=["sleep", "2"], gpus=1)).ids[0]
        cluster.wait_final([short], timeout=90)
        stopped = [i for i in long if job(cluster, i).preemptions > 0]
        assert len(stopped) == 1, [history(cluster, i) for i in long]
