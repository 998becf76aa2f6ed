"""Job dependencies live (`submit --dependency`, issue 35): a real server and a
real agent on 127.0.0.1, jobs submitted through the `schedulearn` CLI.

A pipeline waits with its reason while GPUs are free, starts when its
dependency holds, and a job whose dependency can never hold ends `cancelled`
saying why (and so do the jobs that wait on it); `afterok:ARRAY` waits for
every task of the array.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_cluster import Cluster, ok, one_node, submitted_id


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with one_node(tmp_path_factory.mktemp("dependencies"), gpus=4) as c:
        yield c


def submit(cluster: Cluster, *args: str) -> int:
    return submitted_id(ok(cluster.cli("submit", "--gpus", "1", *args)))


def test_a_pipeline_waits_for_its_dependency_and_the_impossible_is_cancelled(
    cluster: Cluster, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    first = submit(cluster, "--", f"while [ ! -e {gate} ]; do sleep 0.1; done")
    train = submit(cluster, "--dependency", f"afterok:{first}", "--", "echo trained")
    cleanup = submit(cluster, "-d", f"afterany:{first}", "--", "echo cleaned")
    rescue = submit(cluster, "-d", f"afternotok:{first}", "--", "echo rescued")
    after_rescue = submit(cluster, "-d", f"afterok:{rescue}", "--", "echo never")
    cluster.wait_state(first, {"running"})
    cluster.settle()

    # GPUs are free (1 of 4 used), yet each waits, saying for what.
    with cluster.client() as c:
        for job_id, why in (
            (train, f"waits for job {first} to succeed"),
            (cleanup, f"waits for job {first} to end"),
            (rescue, f"waits for job {first} to fail"),
            (after_rescue, f"waits for job {rescue} to succeed"),
        ):
            job = c.job(job_id)
            assert job.state == "pending" and job.waiting_reason == why, job
            # No forecast can say when another job ends as it asks.
            assert job.predicted_start_at is None, job
    shown = ok(cluster.cli("show", str(train))).stdout
    assert f"waits for job {first} to succeed" in shown
    assert f"afterok:{first}" in shown

    gate.touch()
    ended = cluster.wait_final([first, train, cleanup, rescue, after_rescue])
    assert ended[first].state == "succeeded"
    assert ended[train].state == "succeeded" and ended[cleanup].state == "succeeded"
    # Started only once the job it waited on had ended.
    assert (ended[train].started_at or 0) >= (ended[first].ended_at or 0)
    assert "trained" in cluster.log_text(train)
    assert ended[rescue].state == "cancelled"
    assert ended[rescue].message == (
        f"dependency afternotok:{first} can never be met: job {first} succeeded"
    )
    # The job waiting on the cancelled one cannot start either.
    assert ended[after_rescue].state == "cancelled"
    assert f"job {rescue} did not succeed" in (ended[after_rescue].message or "")
    with cluster.client() as c:
        last = c.history(rescue).transitions[-1]
    assert (last.from_state, last.to_state) == ("pending", "cancelled")
    assert "can never be met" in last.message


def test_afterok_on_an_array_waits_for_every_task(cluster: Cluster, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    # Task 0 ends at once; task 1 waits for the gate; task 2 fails after the gate.
    script = (
        f'[ "$SCHEDULEARN_ARRAY_INDEX" = 0 ] && exit 0; '
        f"while [ ! -e {gate} ]; do sleep 0.1; done; "
        f'[ "$SCHEDULEARN_ARRAY_INDEX" = 1 ]'
    )
    array = submit(cluster, "--array", "0-2", "--", script)
    every = submit(cluster, "-d", f"afterany:{array}", "--", "echo all ended")
    all_ok = submit(cluster, "-d", f"afterok:{array}", "--", "echo never")
    cluster.wait_final([array])  # task 0
    cluster.settle()
    with cluster.client() as c:
        waiting = c.job(every)
        assert waiting.state == "pending", waiting
        assert waiting.waiting_reason == f"waits for every task of array {array} to end"
        assert c.job(all_ok).waiting_reason == f"waits for every task of array {array} to succeed"

    gate.touch()
    with cluster.client() as c:
        tasks = [j.id for j in c.jobs(array=array, limit=10).items]
    assert len(tasks) == 3
    ended = cluster.wait_final([*tasks, every, all_ok])
    assert sorted(ended[t].state for t in tasks) == ["failed", "succeeded", "succeeded"]
    assert ended[every].state == "succeeded"
    assert (ended[every].started_at or 0) >= max(ended[t].ended_at or 0 for t in tasks)
    assert ended[all_ok].state == "cancelled"
    assert ended[all_ok].message == (
        f"dependency afterok:{array} can never be met: 1 task(s) of array {array} did not succeed"
    )


def test_a_bad_dependency_is_refused_saying_what_to_write(cluster: Cluster) -> None:
    missing = cluster.cli("submit", "-d", "afterok:99999", "--", "true")
    assert missing.returncode != 0
    assert "names job 99999, which does not exist" in missing.stderr
    garbled = cluster.cli("submit", "-d", "after:1", "--", "true")
    assert garbled.returncode == 2
    assert "'after' is not a dependency kind" in garbled.stderr
    assert "afterok, afterany, afternotok" in garbled.stderr
