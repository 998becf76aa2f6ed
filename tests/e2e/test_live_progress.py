"""Issue 5, done-when 5 (the CLI half): progress a training script reports with
`schedulearn.runtime.report()` shows in `schedulearn show`, run as a process,
while the job runs and after it ends. Real server and agent processes. (The
web page half is a browser test.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from e2e_cluster import Cluster
from live_examples import digits_command, job, live_cluster, wait_for

from schedulearn.protocol import JobSpec

SHOWN = re.compile(
    r"epoch (\d+)/(\d+), step (\d+), loss ([-+.\deE]+), accuracy ([.\d]+), ([.\deE+]+) samples/s"
)
LOGGED = re.compile(r"epoch (\d+)/\d+ loss=([.\d]+) accuracy=([.\d]+) step=(\d+)")


def _show(cluster: Cluster, job_id: int) -> tuple[str, tuple[str, ...]]:
    shown = cluster.cli("show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    match = SHOWN.search(shown.stdout)
    assert match, f"no progress line in `schedulearn show {job_id}`:\n{shown.stdout}"
    return shown.stdout, match.groups()


def _matches_the_log(cluster: Cluster, job_id: int, shown: tuple[str, ...]) -> None:
    """What `show` printed is what the script printed for that epoch.

    Progress and output reach the server by separate ways (the agent tails
    the progress file and ships the log in batches), and the script reports
    an epoch just before printing it: the epoch's line may come a moment
    after `show` had the epoch, so it is waited for."""
    epoch, _total, step, loss, accuracy, _rate = shown

    def logged_epoch() -> tuple[str, str, str] | None:
        logged = LOGGED.findall(cluster.log_text(job_id))
        return next(((lo, acc, st) for e, lo, acc, st in logged if e == epoch), None)

    log_loss, log_accuracy, log_step = wait_for(
        f"epoch {epoch}, shown by `show`, in the job's log", logged_epoch, cluster, timeout=30
    )
    assert step == log_step
    assert float(loss) == pytest.approx(float(log_loss), abs=6e-4)  # 4 digits vs 4 decimals
    assert float(accuracy) == pytest.approx(float(log_accuracy), abs=6e-4)


def test_show_prints_the_latest_epoch_loss_and_accuracy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # Rich wraps the table to the terminal width
    with live_cluster(tmp_path, {"a": 1}) as cluster:
        with cluster.client() as c:
            job_id = c.submit(
                JobSpec(
                    name="digits",
                    command=digits_command("--epochs", "6", "--sleep-per-step", "0.02"),
                    gpus=1,
                )
            ).ids[0]
        wait_for(
            "two epochs of progress",
            lambda: (p := job(cluster, job_id).progress) and (p.epoch or 0) >= 2,
            cluster,
            timeout=90,
        )
        out, shown = _show(cluster, job_id)
        if job(cluster, job_id).state == "running":
            assert re.search(r"state\s+running", out), out
        assert 2 <= int(shown[0]) <= 6 and shown[1] == "6"
        _matches_the_log(cluster, job_id, shown)

        done = cluster.wait_final([job_id], timeout=120)[job_id]
        assert done.state == "succeeded", done.message
        out, shown = _show(cluster, job_id)
        assert shown[:3] == ("6", "6", str(6 * 90)), out  # 90 steps of 16 per epoch
        assert float(shown[4]) > 0.9, out  # it learned
        _matches_the_log(cluster, job_id, shown)

        as_json = cluster.cli("show", str(job_id), "--json")
        assert as_json.returncode == 0, as_json.stderr
        progress = json.loads(as_json.stdout)["progress"]
        assert progress["epoch"] == 6 and progress["total_epochs"] == 6
        assert progress["step"] == 540 and progress["samples_per_sec"] > 0
