"""Issue 5, done-when 1: under `timeslice` on one GPU, two preemptible digits jobs
take turns (each is preempted at least once) and both finish with the final
weights of an uninterrupted run. Real server and agent processes; checkpoints
travel through the server.

A turn can end anywhere in a run, and each place leaves its own trace in the
log; `check_turns` knows them all (the test once failed on the third)."""

from __future__ import annotations

import re
from pathlib import Path

from live_examples import (
    DIGEST,
    RESUMED,
    digits_command,
    history,
    live_cluster,
    reference_digest,
)

from schedulearn.protocol import JobSpec

ARGS = ("--epochs", "8", "--seed", "3")
# Mid-epoch: "saved epoch 2 step 241"; between epochs: "saved epoch 3; exiting".
STOPPED_ANYWHERE = re.compile(r"stop requested: saved epoch (\d+)(?: step (\d+))?")
# The script saves at the end of every epoch, then prints this line.
EPOCH_SAVED = re.compile(r"epoch (\d+)/\d+ loss=\S+ accuracy=\S+ step=(\d+)")


def check_turns(log: str, preemptions: int) -> int:
    """Every preemption of a run left a resume, and every resume restored
    exactly the newest state the run had saved (the epoch and step of the
    stop the script saw, or of the last epoch it ended, when its turn ended
    before it could see the stop: before its start-up had installed the
    handler, as a loaded machine's imports can take longer than a quantum).
    Returns the stops.

    The one turn that may resume from an older state is one that ended
    after the last epoch, while the script printed its result: it exits 0,
    finished, but an exit while preempting is taken as saved-and-stopped
    (a script may well exit 0 after saving), so the job runs once more
    from the newest checkpoint the server holds, with the same weights."""
    found = [
        (m.start(), kind, m)
        for kind, pattern in (
            ("stop", STOPPED_ANYWHERE),
            ("resume", RESUMED),
            ("epoch", EPOCH_SAVED),
            ("final", DIGEST),
        )
        for m in pattern.finditer(log)
    ]
    saved: tuple[str, str] | None = None  # (epoch, step) of the newest save
    stops = resumes = after_the_end = 0
    finished = False
    for _, kind, m in sorted(found, key=lambda event: event[0]):
        if kind == "epoch":
            saved = (m.group(1), m.group(2))
        elif kind == "stop":
            stops += 1
            if m.group(2):
                saved = (m.group(1), m.group(2))
            else:  # between epochs: the epoch line just before it named the step
                assert saved is not None and saved[0] == m.group(1), log
        elif kind == "final":
            finished = True
        else:
            resumes += 1
            if finished:  # from the end, or from the last stop's state
                after_the_end += 1
                finished = False
            else:
                assert (m.group(1), m.group(2)) == saved, log
            saved = (m.group(1), m.group(2))
    assert resumes == preemptions, log
    assert after_the_end <= 1, log
    return stops


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
