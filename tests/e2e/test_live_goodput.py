"""Issues 13 and 34, live: under the `goodput` policy the PyTorch example
(`--adaptive`) grows when GPUs free up and shrinks when a newcomer arrives;
after each restart the runtime chooses the batch size and learning rate for
its new world (`runtime.AdaptiveBatch`), the script logs them and reports
them as metrics (`batch_size`, `learning_rate`: the API's progress history
and `schedulearn show`), and it ends at the same held-out loss as a
fixed-size run, within a tolerance that a run stopped at half its steps
fails. Real server and agent processes; the job's step times, gradient
statistics and declared total reach the policy only through its progress
reports (`ProgressReport.goodput`).

The example runs as one process playing every worker of its world (the
virtual GPUs have no compute of their own) and sleeps a simulated
accelerator's time per step: a fixed cost plus a cost per sample of one
worker's share, so more GPUs really make a step faster.

Tolerance: the final held-out loss is within 10% of the fixed-size run's
(the same script at batch 32 on one worker, `--max-batch 32`). Both decay
the learning rate along a cosine over the progress towards the target
(`--schedule cosine`), which makes the end point nearly independent of the
batches a run chose; with a constant rate (issue 13's first version)
adaptive runs ended between -3% and +42% of the fixed-size run, and its
75% bound could not tell a run stopped at half its steps (+55%).

Spread measured with the cosine schedule (seed 0; the fixed-size run ends
at 0.1453, and at 0.1873 when stopped at half its steps, +29%): outside
Schedulearn, two runs on 2 workers 0.1435 and 0.1444 and one on 4
workers 0.1440 (-1.2% to -0.6%: the batches chosen follow measured step
times); live, five runs of this test (grown from 1 GPU, then shrunk to 2
or fewer; the one inspected went 1 -> 4 -> 2, batch 32 -> 86..128) 0.1429,
0.1427, 0.1424, 0.1400 and 0.1438 (-3.6% to -1.0%). The same live run stopped at half its progress
ended at 0.1771 (+22%) and failed the bound (checked by editing the
script). The test also checks, on its own fixed-size run, that that run
stopped at half its steps falls outside the bound. 65-115 s on a 2-core
machine at load 11-16."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from e2e_cluster import ADMIN, Cluster
from live_examples import REPO, RESUMED, history, job, live_cluster, wait_for

from dependencies import Dependency, need_module
from schedulearn.protocol import (
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    JobSpec,
    ProgressHistory,
    ProgressPublic,
)

pytestmark = pytest.mark.slow

SCRIPT = REPO / "examples" / "train_torch.py"
TRAINING = (
    *("--epochs", "8", "--batch-size", "32", "--lr", "0.05", "--seed", "0"),
    *("--schedule", "cosine"),
)
ADAPTIVE = ("--adaptive", "--max-batch", "256", "--max-local-batch", "64")
# The simulated accelerator: 40 ms a step plus 1.5 ms a sample of one worker's share.
DEVICE = ("--sleep-per-step", "0.04", "--sleep-per-sample", "0.0015")
CONFIG = re.compile(
    r"world size (\d+): batch size (\d+) \((\d+) per GPU, (\d+) accumulation steps\), "
    r"learning rate (\S+) \(scale (\S+)\)"
)
FINAL = re.compile(r"final test loss (\S+) accuracy (\S+)")
# An epoch's line: "epoch 4 loss=... step=180 progress=180/360 ... test_loss=0.1873".
EPOCH = re.compile(r"epoch (\d+) .*progress=(\d+)/(\d+) .*test_loss=(\S+)")
TOLERANCE = 0.10  # relative, on the final held-out loss


@pytest.fixture(autouse=True)
def _torch() -> None:
    need_module("torch", Dependency.TORCH)
    need_module("sklearn", Dependency.SKLEARN)


def _start_fixed_size_run(tmp: Path) -> subprocess.Popen[str]:
    """The example on one worker at the initial batch and rate, never adapted
    (`--max-batch 32`), outside Schedulearn; no simulated accelerator (it
    changes no weights). Run beside the live cluster: the test waits on both."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    env["SCHEDULEARN_CHECKPOINT_DIR"] = str(tmp / "fixed-checkpoint")
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *TRAINING, "--adaptive", "--max-batch", "32"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _losses(run: subprocess.Popen[str]) -> tuple[float, float]:
    """The fixed-size run's final held-out loss, and its held-out loss when it
    had made half its steps (what a run stopped there would end at)."""
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out
    match = FINAL.search(out)
    assert match, out
    half = [
        float(loss) for _, done, target, loss in EPOCH.findall(out) if 2 * int(done) == int(target)
    ]
    assert half, out
    return float(match.group(1)), half[0]


def _configs(log: str) -> list[tuple[int, int, int, int, float, float]]:
    """(world, batch, local batch, accumulation steps, learning rate, scale), as logged."""
    return [
        (int(w), int(b), int(lb), int(a), float(lr), float(s))
        for w, b, lb, a, lr, s in CONFIG.findall(log)
    ]


def _worlds_at_starts(cluster: Cluster, job_id: int) -> list[int]:
    """The world size each (re)start of the script logged first."""
    worlds = []
    for part in cluster.log_text(job_id).split("checkpoint directory")[1:]:
        found = CONFIG.search(part)
        if found:
            worlds.append(int(found.group(1)))
    return worlds


def test_goodput_grows_and_shrinks_the_adaptive_torch_example(tmp_path: Path) -> None:
    fixed_run = _start_fixed_size_run(tmp_path)
    try:
        log, reports = _grow_and_shrink(tmp_path)
    except BaseException:
        fixed_run.kill()
        raise
    fixed, half = _losses(fixed_run)
    # Every configuration the script logged is one the runtime may choose:
    # batch = world x local x (accumulation + 1) within the limits, the rate
    # scaled by AdaScale's gain (1 at the initial batch, at most linear).
    configs = _configs(log)
    assert len(configs) >= 3
    for world, batch, local, accum, lr, scale in configs:
        assert batch == world * local * (accum + 1) and 32 <= batch <= 256 and local <= 64
        assert 1.0 <= scale <= batch / 32 + 1e-3
        assert lr == pytest.approx(0.05 * scale, rel=1e-3)
    # ... and each is in the job's metrics, as the API gives them: its world
    # (the goodput record's replicas), batch size and learning rate.
    for world, batch, _, _, lr, _ in configs:
        assert any(
            r.goodput is not None
            and r.goodput.replicas == world
            and r.metrics.get("batch_size") == batch
            and r.metrics.get("learning_rate") == pytest.approx(lr, rel=1e-4)
            for r in reports
        ), (world, batch, lr, [(r.goodput, r.metrics) for r in reports])
    # Each restart went on from the checkpoint before it.
    assert log.count("starting fresh") == 1 and len(RESUMED.findall(log)) >= 2, log
    match = FINAL.search(log)
    assert match, log[-3000:]
    loss = float(match.group(1))
    print(f"held-out loss {loss:.4f}, fixed-size run {fixed:.4f}, stopped at half {half:.4f}")
    # The bound tells a run that went on to its target from one stopped at half
    # its steps: the fixed-size run, stopped there, is outside it.
    assert half > fixed * (1 + TOLERANCE), (half, fixed)
    assert abs(loss - fixed) <= TOLERANCE * fixed, (loss, fixed, half, log[-3000:])


def _grow_and_shrink(tmp_path: Path) -> tuple[str, list[ProgressPublic]]:
    """The live part: the job's log once it has grown, shrunk and finished, and
    its progress reports as the API gives them."""
    with live_cluster(tmp_path, {"big": 4}) as cluster:
        with cluster.client() as c:
            # A restart (checkpoint, torch import, resume) costs a few seconds here.
            c.set_policy("goodput:restart_cost=4:hysteresis=1")
            # The blocker ends when the test says: after a fixed time it ended, on
            # a loaded machine, before the job's first start had imported torch,
            # and the job's first logged start was already on 4 GPUs.
            go = tmp_path / "blocker-may-end"
            blocker = c.submit(
                JobSpec(name="blocker", command=f"while [ ! -e {go} ]; do sleep 0.2; done", gpus=3)
            ).ids[0]
            cluster.wait_state(blocker, {"running"})
            adaptive = c.submit(
                JobSpec(
                    name="adaptive",
                    command=[sys.executable, str(SCRIPT), *TRAINING, *ADAPTIVE, *DEVICE],
                    min_gpus=1,
                    max_gpus=4,
                    preemptible=True,
                    env={"PYTHONUNBUFFERED": "1"},
                )
            ).ids[0]
        # One GPU is free: it starts on it, at the initial batch and rate.
        wait_for("a start on one GPU", lambda: _configs(cluster.log_text(adaptive)), cluster, 90)
        assert _configs(cluster.log_text(adaptive))[0] == (1, 32, 32, 0, 0.05, 1.0)
        wait_for(
            "the job to report its step times on one GPU",
            lambda: (p := job(cluster, adaptive).progress) and p.goodput and p.goodput.step_time,
            cluster,
            120,
        )
        go.touch()

        # The blocker ends; with the steps it measured on one GPU the policy
        # expects more GPUs to pay for a restart: the job grows into them.
        wait_for(
            "the job to grow",
            lambda: len(_worlds_at_starts(cluster, adaptive)) >= 2,
            cluster,
            120,
        )
        grown = _worlds_at_starts(cluster, adaptive)[1]
        assert grown > 1, cluster.log_text(adaptive)
        # The restarted script reported its new configuration at once (its steps
        # there come with its next epoch's report).
        wait_for(
            "a report from the grown job",
            lambda: (p := job(cluster, adaptive).progress) and p.goodput and p.goodput.replicas > 1,
            cluster,
            60,
        )

        # A newcomer needs 2 GPUs (and outlives the job, so that it does not grow
        # back): the job gives them up and restarts smaller.
        with cluster.client() as c:
            newcomer = c.submit(JobSpec(name="newcomer", command="sleep 600", gpus=2)).ids[0]
        cluster.wait_state(newcomer, {"running"}, timeout=120)
        wait_for(
            "the job to shrink",
            lambda: len(_worlds_at_starts(cluster, adaptive)) >= 3,
            cluster,
            120,
        )
        worlds = _worlds_at_starts(cluster, adaptive)
        assert worlds[2] < grown and worlds[2] <= 4 - 2, worlds
        steps = history(cluster, adaptive)
        assert f"resizing from 1 to {grown} GPUs" in steps, steps
        assert f"resizing from {grown} to {worlds[2]} GPUs" in steps, steps

        done = cluster.wait_final([adaptive], timeout=240)[adaptive]
        log = cluster.log_text(adaptive)
        assert done.state == "succeeded", f"{done.message}\n{steps}\n{log[-3000:]}"
        assert done.preemptions == 0 and done.resizes >= 2  # resized, never sent back to the queue
        with cluster.client() as c:
            c.cancel(newcomer)
        reply = httpx.get(
            f"{cluster.server.url}/api/v1/jobs/{adaptive}/progress",
            # A client of this protocol is shown the goodput record (older ones are not).
            headers={"Authorization": f"Bearer {ADMIN}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)},
            timeout=60,
        )
        reply.raise_for_status()
        return log, ProgressHistory.model_validate(reply.json()).reports
