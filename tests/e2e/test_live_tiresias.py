"""Issue 5, done-when 2: under `tiresias`, a long job is preempted for a short one
and resumes where it stopped. Real server and agent processes on one GPU."""

from __future__ import annotations

import time
from pathlib import Path

from live_examples import (
    RESUMED,
    check_turns,
    digest_of,
    digits_command,
    history,
    job,
    live_cluster,
    reference_digest,
    wait_for,
)

from schedulearn.protocol import JobSpec

LONG = ("--epochs", "10", "--seed", "5")


def test_a_long_job_yields_to_a_short_one_and_resumes_where_it_stopped(tmp_path: Path) -> None:
    expected = reference_digest(tmp_path, *LONG)
    with live_cluster(tmp_path, {"solo": 1}) as cluster:
        with cluster.client() as c:
            # Queue 0 ends at 3 GPU-seconds: a job that has run 3 s on one GPU
            # drops to queue 1, and any newcomer (queue 0) may preempt it.
            c.set_policy("tiresias:threshold=3")
            long_id = c.submit(
                JobSpec(
                    name="long",
                    command=digits_command(*LONG, "--sleep-per-step", "0.02"),
                    gpus=1,
                    preemptible=True,
                )
            ).ids[0]
        wait_for(
            "the long job to finish an epoch",
            lambda: (p := job(cluster, long_id).progress) and (p.epoch or 0) >= 1,
            cluster,
            timeout=60,
        )
        time.sleep(1.0)  # past the threshold, and into the middle of an epoch
        with cluster.client() as c:
            short_id = c.submit(
                JobSpec(name="short", command=digits_command("--epochs", "1"), gpus=1)
            ).ids[0]
        jobs = cluster.wait_final([long_id, short_id], timeout=180)
        long, short = jobs[long_id], jobs[short_id]
        steps = history(cluster, long_id)
        assert long.state == "succeeded" and short.state == "succeeded", steps
        assert long.preemptions == 1, steps
        assert short.preemptions == 0
        # The short job ran inside the long job's gap, and ended first.
        assert short.started_at is not None and short.ended_at is not None
        assert long.ended_at is not None and short.ended_at < long.ended_at
        log = cluster.log_text(long_id)
        # One resume, from exactly the state saved last: the step it stopped
        # at mid-epoch (not from scratch, not from the epoch's start), or the
        # epoch it had just ended when the stop came at an epoch's end (a
        # loaded machine's timing decides which).
        assert check_turns(log, preemptions=1) == 1, log
        (resumed,) = RESUMED.findall(log)
        assert int(resumed[0]) >= 1, log
        assert digest_of(log) == expected
