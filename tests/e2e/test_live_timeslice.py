"""Issue 5, done-when 1: under `timeslice` on one GPU, two preemptible digits jobs
take turns (each is preempted at least once) and both finish with the final
weights of an uninterrupted run. Real server and agent processes; checkpoints
travel through the server.

A turn can end anywhere in a run, and each place leaves its own trace in the
log; `check_turns` (live_examples.py) knows them all (the test once failed on the third)."""

from __future__ import annotations

from pathlib import Path

from live_examples import (
    DIGEST,
    check_turns,
    digits_command,
    history,
    live_cluster,
    reference_digest,
)

from schedulearn.protocol import JobSpec

ARGS = ("--epochs", "8", "--seed", "3")


def test_two_jobs_take_turns_on_one_gpu_and_end_as_if_never_interrupted(tmp_path: Path) -> None:
    expected = reference_digest(tmp_path, *ARGS)
    with live_cluster(tmp_path, {"solo": 1}) as cluster:
        with cluster.client() as c:
            c.set_policy("timeslice:quantum=3")
            ids = [
                c.submit(
                    JobSpec(
                        name=f"digits-{n}",
                        command=digits_command(*ARGS, "--sleep-per-step", "0.01"),
                        gpus=1,
                        preemptible=True,
                    )
                ).ids[0]
                for n in (1, 2)
            ]
        jobs = cluster.wait_final(ids, timeout=240)
        stops: dict[int, int] = {}
        for job_id, job in jobs.items():
            steps = history(cluster, job_id)
            assert job.state == "succeeded", f"job {job_id}: {job.message}\n{steps}"
            assert job.preemptions >= 1, f"job {job_id} never gave up the GPU:\n{steps}"
            log = cluster.log_text(job_id)
            stops[job_id] = check_turns(log, job.preemptions)
            assert set(DIGEST.findall(log)) == {expected}, f"job {job_id} ended with other weights"
        # They took turns: each ran while the other waited, more than once.
        assert sum(stops.values()) >= 2, stops
