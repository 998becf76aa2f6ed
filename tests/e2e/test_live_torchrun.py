"""The PyTorch example under the `torchrun` launcher on the live system: two
worker processes (DistributedDataParallel over gloo) moved from one agent to
another mid-epoch. All workers stop at the same step, rank 0's checkpoint
travels through the server, and the job ends with the weights of a torchrun
run that was never moved. Needs PyTorch (not a project dependency;
scripts/test installs the CPU wheel kept on disk): skipped without it
locally, a failure in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from live_examples import (
    REPO,
    RESUMED,
    WORLD,
    digest_of,
    history,
    live_cluster,
    move_to_the_other_agent_mid_epoch,
)

from dependencies import Dependency, need_module
from schedulearn.protocol import JobSpec, Launcher

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _torch() -> None:
    need_module("torch", Dependency.TORCH)


SCRIPT = REPO / "examples" / "train_torch.py"
ARGS = ("--epochs", "4", "--seed", "2")


def _reference(tmp: Path) -> str:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun, "torch is installed but torchrun is not beside the interpreter"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    env["SCHEDULEARN_CHECKPOINT_DIR"] = str(tmp / "reference-checkpoint")
    argv = [torchrun, "--standalone", "--nnodes=1", "--nproc_per_node=2", str(SCRIPT), *ARGS]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return digest_of(done.stdout)


def test_a_torchrun_job_moves_between_agents_and_ends_with_unmoved_weights(
    tmp_path: Path,
) -> None:
    expected = _reference(tmp_path)
    with live_cluster(tmp_path, {"a": 2, "b": 2}) as cluster:
        with cluster.client() as c:
            job_id = c.submit(
                JobSpec(
                    name="torch",
                    command=[sys.executable, str(SCRIPT), *ARGS, "--sleep-per-step", "0.03"],
                    gpus=2,
                    launcher=Launcher.TORCHRUN,
                    preemptible=True,
                )
            ).ids[0]
        target = move_to_the_other_agent_mid_epoch(cluster, job_id, timeout=120)
        done = cluster.wait_final([job_id], timeout=150)[job_id]
        steps = history(cluster, job_id)
        assert done.state == "succeeded", f"{done.message}\n{steps}"
        assert done.migrations == 1 and done.placement == {target: [0, 1]}, steps
        log = cluster.log_text(job_id)
        assert [w[:2] for w in WORLD.findall(log)] == [("2", "32"), ("2", "32")], log
        (resumed,) = RESUMED.findall(log)
        assert int(resumed[0]) >= 1, log
        assert log.count("stop requested") == 1, "rank 0 alone prints; all ranks stop together"
        assert digest_of(log) == expected
