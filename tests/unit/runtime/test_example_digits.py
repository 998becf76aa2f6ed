"""examples/train_digits.py as a scheduler runs it: real processes, SIGTERM, resume, digests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dependencies import Dependency, need_module


@pytest.fixture(autouse=True)
def _digits() -> None:
    need_module("sklearn", Dependency.SKLEARN)  # it holds the digits data set


SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "train_digits.py"
DIGEST = re.compile(r"final weights sha256 ([0-9a-f]{64})")


def _env(ckpt: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK"):
        env.pop(name, None)
    return {**env, "SCHEDULEARN_CHECKPOINT_DIR": str(ckpt), **extra}


def _start(ckpt: Path, *args: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        env=_env(ckpt, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _run(ckpt: Path, *args: str, **extra: str) -> tuple[int, str]:
    proc = _start(ckpt, *args, **extra)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def _digest(out: str) -> str:
    match = DIGEST.search(out)
    assert match, f"no digest printed:\n{out}"
    return match.group(1)


def _stop_after(proc: subprocess.Popen[str], marker: str) -> str:
    """Read output until `marker` shows, then SIGTERM the run and return all it printed."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            break
    else:
        pytest.fail(f"the run ended before printing {marker!r}:\n{''.join(seen)}")
    time.sleep(0.05)  # land the signal in the middle of an epoch
    proc.send_signal(signal.SIGTERM)
    rest = proc.stdout.read()  # not communicate(): it would skip what the loop buffered
    proc.wait(timeout=60)
    return "".join(seen) + rest


def test_preempted_twice_ends_with_the_weights_of_an_uninterrupted_run(tmp_path: Path) -> None:
    args = ("--epochs", "4", "--sleep-per-step", "0.002")
    code, straight = _run(tmp_path / "straight", *args)
    assert code == 0, straight
    expected = _digest(straight)

    ckpt = tmp_path / "preempted"
    first = _stop_after(_start(ckpt, *args), "epoch 1/4")
    assert "stop requested" in first and DIGEST.search(first) is None, first
    second_proc = _start(ckpt, *args)
    second = _stop_after(second_proc, "epoch 3/4")
    assert second_proc.returncode == 143, second  # stopped, not finished
    assert re.search(r"resumed from epoch 1 \(step \d+, \d+ samples into the epoch\)", second)
    code, last = _run(ckpt, *args)
    assert code == 0, last
    assert "resumed from epoch 3" in last
    assert _digest(last) == expected


def test_a_finished_run_resumed_again_changes_nothing(tmp_path: Path) -> None:
    code, out = _run(tmp_path, "--epochs", "2")
    assert code == 0
    code, again = _run(tmp_path, "--epochs", "2")
    assert code == 0
    assert "resumed from epoch 2" in again and "epoch 1/2" not in again
    assert _digest(again) == _digest(out)


def test_seed_changes_the_weights(tmp_path: Path) -> None:
    _, a = _run(tmp_path / "a", "--epochs", "1", "--seed", "1")
    _, b = _run(tmp_path / "b", "--epochs", "1", "--seed", "2")
    assert _digest(a) != _digest(b)


def test_reports_every_epoch_and_learns(tmp_path: Path) -> None:
    progress = tmp_path / "progress.jsonl"
    code, out = _run(tmp_path / "c", "--epochs", "5", SCHEDULEARN_PROGRESS_FILE=str(progress))
    assert code == 0, out
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2, 3, 4, 5]
    assert all(r["total_epochs"] == 5 and r["samples_per_sec"] > 0 for r in records)
    assert records[-1]["loss"] < records[0]["loss"]
    assert records[-1]["accuracy"] > 0.9  # digits is easy; a broken gradient is not
    assert records[-1]["step"] == 5 * 90  # 1,437 training samples in batches of 16


@pytest.mark.parametrize("gpus", [1, 4])
def test_world_size_scales_batch_and_learning_rate(tmp_path: Path, gpus: int) -> None:
    code, out = _run(tmp_path, "--epochs", "1", SCHEDULEARN_NUM_GPUS=str(gpus))
    assert code == 0, out
    lr = 0.02 * gpus
    assert (
        f"world size {gpus}: global batch {16 * gpus} (16 per worker), learning rate {lr:g}" in out
    )


def test_resize_on_resume_prints_the_new_world(tmp_path: Path) -> None:
    args = ("--epochs", "3", "--sleep-per-step", "0.002")
    stopped = _stop_after(_start(tmp_path, *args, SCHEDULEARN_NUM_GPUS="1"), "epoch 1/3")
    assert "world size 1: global batch 16" in stopped
    code, grown = _run(tmp_path, *args, SCHEDULEARN_NUM_GPUS="2")
    assert code == 0, grown
    assert "resumed from epoch 1" in grown
    assert "world size 2: global batch 32 (16 per worker), learning rate 0.04" in grown
    # The grown run takes half as many steps per remaining epoch.
    steps = [int(s) for s in re.findall(r"step=(\d+)", grown)]
    assert steps[-1] - steps[-2] == 45


def test_bad_arguments_say_what_to_change(tmp_path: Path) -> None:
    code, out = _run(tmp_path, "--epochs", "0")
    assert code == 2
    assert "--epochs, --batch-size and --hidden must be 1 or more" in out
