"""examples/train_torch.py --adaptive on the CPU: under torchrun every process
chooses the same batch (or the all-reduces would not match), a preempted run
resumes with what it had learnt, and the reports carry the goodput record.
Needs PyTorch (see test_example_torch.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_example_torch import _finish, _start, _stop_after

from dependencies import Dependency, need_module

pytestmark = pytest.mark.slow

ARGS = ("--adaptive", "--epochs", "3", "--batch-size", "32", "--max-batch", "128")
CONFIG = re.compile(
    r"world size (\d+): batch size (\d+) \((\d+) per GPU, (\d+) accumulation steps\), "
    r"learning rate (\S+) \(scale (\S+)\)"
)
PROGRESS = re.compile(r"progress=(\d+)/(\d+)")


@pytest.fixture(autouse=True)
def _libraries() -> None:
    need_module("torch", Dependency.TORCH)
    need_module("sklearn", Dependency.SKLEARN)


def test_adaptive_under_torchrun_is_resumed_with_what_it_learnt(tmp_path: Path) -> None:
    ckpt, progress = tmp_path / "ckpt", tmp_path / "progress.jsonl"
    env = {"SCHEDULEARN_PROGRESS_FILE": str(progress)}
    first = _stop_after(_start(ckpt, 2, *ARGS, "--sleep-per-step", "0.01", **env), "epoch 2 ")
    assert "stop requested" in first, first
    done_before = int(PROGRESS.findall(first)[-1][0])
    rest = _finish(_start(ckpt, 2, *ARGS, **env))
    assert "final test loss" in rest, rest
    # Resumed where it stopped, not from scratch, and ran until its target.
    assert "starting fresh" not in rest and "resumed from epoch" in rest
    done, target = map(int, PROGRESS.findall(rest)[-1])
    assert done >= target > done_before
    for world, batch, local, accum, lr, scale in CONFIG.findall(first + rest):
        assert int(world) == 2 and int(batch) == 2 * int(local) * (int(accum) + 1)
        assert int(batch) <= 128 and float(lr) == pytest.approx(0.02 * float(scale), rel=1e-3)
    # Rank 0 alone reported, each report with the goodput record of 2 processes.
    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    assert lines and all(r["goodput"]["replicas"] == 2 for r in lines)
    assert lines[-1]["goodput"]["step_time"] > 0 and lines[-1]["goodput"]["grad_sqr"] is not None
    assert [r["step"] for r in lines] == sorted(r["step"] for r in lines)
