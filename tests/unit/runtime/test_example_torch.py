"""examples/train_torch.py on the CPU: alone and under torchrun, preempted and resumed.

Needs PyTorch, which is not a project dependency (uv would fetch a 3 GB CUDA
build); scripts/test installs the CPU wheel this machine keeps on disk.
Without it the tests skip locally and fail in CI (tests/dependencies.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dependencies import Dependency, need_module

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _libraries() -> None:
    need_module("torch", Dependency.TORCH)
    need_module("sklearn", Dependency.SKLEARN)  # it holds the digits data set


SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "train_torch.py"
DIGEST = re.compile(r"final weights sha256 ([0-9a-f]{64})")


def _argv(nproc: int, *args: str) -> list[str]:
    if nproc == 1:
        return [sys.executable, str(SCRIPT), *args]
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun, "torch is installed but torchrun is not beside the interpreter"
    flags = ["--standalone", "--nnodes=1", f"--nproc_per_node={nproc}"]
    return [torchrun, *flags, str(SCRIPT), *args]


def _start(ckpt: Path, nproc: int, *args: str, **extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update({"SCHEDULEARN_CHECKPOINT_DIR": str(ckpt), **extra})
    return subprocess.Popen(
        _argv(nproc, *args),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen[str]) -> str:
    """The rest of the run's output. Read through `proc.stdout` itself: after a
    partial read, communicate() would skip the lines already buffered there."""
    assert proc.stdout is not None
    watchdog = threading.Timer(240, os.killpg, (proc.pid, signal.SIGKILL))
    watchdog.start()
    try:
        out = proc.stdout.read()
        proc.wait()
    finally:
        watchdog.cancel()
    return out


def _stop_after(proc: subprocess.Popen[str], marker: str) -> str:
    """Read output until `marker`, then SIGTERM the launcher (as the agent does)."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            break
    else:
        pytest.fail(f"the run ended before printing {marker!r}:\n{''.join(seen)}")
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    return "".join(seen) + _finish(proc)


def _digest(out: str) -> str:
    match = DIGEST.search(out)
    assert match, f"no digest printed:\n{out}"
    return match.group(1)


@pytest.mark.parametrize("nproc", [1, 2])
def test_preempted_run_ends_with_the_weights_of_an_uninterrupted_one(
    tmp_path: Path, nproc: int
) -> None:
    args = ("--epochs", "3", "--sleep-per-step", "0.01")
    straight = _start(tmp_path / "straight", nproc, *args)
    out = _finish(straight)
    assert straight.returncode == 0, out
    expected = _digest(out)
    assert f"world size {nproc}: global batch {16 * nproc} (16 per worker)" in out

    ckpt = tmp_path / "preempted"
    progress = tmp_path / "progress.jsonl"
    first = _stop_after(
        _start(ckpt, nproc, *args, SCHEDULEARN_PROGRESS_FILE=str(progress)), "epoch 1/3"
    )
    assert "stop requested: saved epoch 1" in first, first
    assert DIGEST.search(first) is None
    resumed = _start(ckpt, nproc, *args, SCHEDULEARN_PROGRESS_FILE=str(progress))
    rest = _finish(resumed)
    assert resumed.returncode == 0, rest
    assert re.search(r"resumed from epoch 1 \(step \d+, \d+ samples into the epoch\)", rest), rest
    assert _digest(rest) == expected
    # Rank 0 alone reported: one line per epoch over both attempts.
    epochs = [json.loads(line)["epoch"] for line in progress.read_text().splitlines()]
    assert epochs == [1, 2, 3]


def test_a_lone_stopped_process_exits_143(tmp_path: Path) -> None:
    proc = _start(tmp_path, 1, "--epochs", "50", "--sleep-per-step", "0.01")
    out = _stop_after(proc, "world size 1")
    assert proc.returncode == 143, out
    assert (tmp_path / "digits-torch.pt").exists()
