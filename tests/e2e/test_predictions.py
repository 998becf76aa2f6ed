"""Predicted start times against the actual ones, with a real server and agent.

Jobs of known durations (`sleep N`, `estimated_duration: N`) queue on one
agent of 4 virtual GPUs. Right after the last submission the test reads
each waiting job's predicted start (the forecast under the policy in
force), lets everything run, and compares with when each job really
started. The error comes from what the forecast cannot know: process
start-up, exit reporting and scheduler latency, which add up along the
queue. The figures are printed (run with -s to see them).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_cluster import Cluster

from schedulearn.protocol import JobSpec

# (GPUs, seconds) in submission order; 50 GPU-seconds on 4 GPUs.
QUEUE = [(4, 3), (2, 2), (2, 4), (1, 2), (3, 3), (4, 2), (1, 1), (2, 3)]
# Bounds on the error of a predicted start: the latencies the forecast does
# not model are a fraction of a second per job ahead in the queue.
MEAN_BOUND_S = 1.5
MAX_BOUND_S = 3.0


@pytest.fixture
def one_agent(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        c.start()
        c.add_agent("a", gpus=4)
        c.wait_nodes(1)
        yield c
    finally:
        c.stop()


def test_predicted_starts_match_actual_starts(
    one_agent: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = one_agent
    monkeypatch.setenv("COLUMNS", "250")  # the CLI's tables, unclipped
    with cluster.client() as c:
        ids = [
            c.submit(
                JobSpec(
                    name=f"known{i}", command=f"sleep {secs}", gpus=gpus, estimated_duration=secs
                )
            ).ids[0]
            for i, (gpus, secs) in enumerate(QUEUE)
        ]
        listing = c.jobs(limit=len(QUEUE))
        asked = time.time()
    predicted = {
        j.id: j.predicted_start_at
        for j in listing.items
        if j.state == "pending" and j.predicted_start_at is not None
    }
    waiting = [j.id for j in listing.items if j.state == "pending"]
    assert len(waiting) >= 5, f"expected a queue, got {[j.state for j in listing.items]}"
    assert set(predicted) == set(waiting), "every waiting job of known duration has a prediction"

    # The CLI shows the same predictions.
    table = cluster.cli("jobs")
    assert table.returncode == 0, table.stderr
    print(table.stdout)
    assert "STARTS ~" in table.stdout and "ENDS ~" in table.stdout

    shown = cluster.cli("show", str(waiting[0]))  # newest first: the last to start
    print(shown.stdout)
    # `show` writes field names as words ("predicted start at").
    assert "predicted start at" in shown.stdout and "duration estimate" in shown.stdout
    preview = cluster.cli("policy", "preview", "--policy", "fifo,srtf")
    assert preview.returncode == 0, preview.stderr
    print(preview.stdout)
    assert "srtf" in preview.stdout and "MEAN JCT" in preview.stdout

    done = cluster.wait_final(ids, timeout=120)
    assert {j.state for j in done.values()} == {"succeeded"}
    errors = []
    for job_id, when in predicted.items():
        actual = done[job_id].started_at
        assert actual is not None
        errors.append(abs(actual - when))
        print(
            f"job {job_id}: predicted start in {when - asked:.2f} s, off by {actual - when:+.2f} s"
        )
    mean = statistics.fmean(errors)
    print(
        f"start-time error over {len(errors)} waiting jobs: mean {mean:.2f} s, "
        f"max {max(errors):.2f} s; the longest predicted wait was "
        f"{max(predicted.values()) - asked:.1f} s"
    )
    assert mean <= MEAN_BOUND_S, errors
    assert max(errors) <= MAX_BOUND_S, errors
