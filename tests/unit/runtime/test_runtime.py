"""The runtime library as a training script sees it: real processes, real signals, real files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from schedulearn.runtime import scale_for_world
from waiting import wait_until

LOOP = textwrap.dedent(
    """
    import sys, time
    from schedulearn import runtime

    state = runtime.load_checkpoint(default={"step": 0})
    print("resumed at", state["step"], flush=True)
    while state["step"] < int(sys.argv[1]):
        state["step"] += 1
        runtime.report(step=state["step"], loss=1.0 / state["step"], epoch=0)
        time.sleep(0.01)
        if runtime.should_stop():
            runtime.save_checkpoint(state)
            print("stopped at", state["step"], flush=True)
            sys.exit(0)
    runtime.save_checkpoint(state)
    print("done at", state["step"], flush=True)
    """
)


def _run(tmp_path: Path, steps: int, **env: str) -> subprocess.Popen[str]:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    full_env = {**os.environ, **env}
    return subprocess.Popen(
        [sys.executable, str(script), str(steps)],
        env=full_env,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_sigterm_lets_the_script_checkpoint_and_resume(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    progress = tmp_path / "progress.jsonl"
    env = {"SCHEDULEARN_CHECKPOINT_DIR": str(ckpt), "SCHEDULEARN_PROGRESS_FILE": str(progress)}
    proc = _run(tmp_path, 100_000, **env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "resumed at 0"
    # Some steps are done (each reports its progress) before the signal lands.
    wait_until(lambda: progress.exists() and progress.read_text().count("\n") >= 3, 10, "3 steps")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0, "the handler must turn SIGTERM into a clean exit"
    stopped_at = int(out.split()[-1])
    assert stopped_at > 0

    again = _run(tmp_path, stopped_at + 5, **env)
    out, _ = again.communicate(timeout=10)
    assert f"resumed at {stopped_at}" in out
    assert f"done at {stopped_at + 5}" in out


def test_report_appends_json_lines_for_the_agent(tmp_path: Path) -> None:
    progress = tmp_path / "progress.jsonl"
    env = {
        "SCHEDULEARN_CHECKPOINT_DIR": str(tmp_path / "c"),
        "SCHEDULEARN_PROGRESS_FILE": str(progress),
    }
    proc = _run(tmp_path, 3, **env)
    proc.communicate(timeout=10)
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert records[1]["loss"] == pytest.approx(0.5)
    assert all(isinstance(r["step"], int) and r["at"] > 0 for r in records)


def test_only_rank_zero_reports_and_checkpoints(tmp_path: Path) -> None:
    progress = tmp_path / "progress.jsonl"
    env = {
        "SCHEDULEARN_CHECKPOINT_DIR": str(tmp_path / "c"),
        "SCHEDULEARN_PROGRESS_FILE": str(progress),
        "RANK": "1",
        "WORLD_SIZE": "2",
    }
    proc = _run(tmp_path, 3, **env)
    proc.communicate(timeout=10)
    assert not progress.exists()
    assert not (tmp_path / "c" / "checkpoint.pkl").exists()


def test_no_agent_means_no_progress_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from schedulearn import runtime

    monkeypatch.delenv("SCHEDULEARN_PROGRESS_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    runtime.report(step=1, loss=0.1)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, 1),
        ({"SCHEDULEARN_NUM_GPUS": "4"}, 4),
        ({"SCHEDULEARN_NUM_GPUS": "4", "WORLD_SIZE": "8"}, 8),
        ({"HOROVOD_SIZE": "3"}, 3),
        ({"OMPI_COMM_WORLD_SIZE": "6"}, 6),
    ],
)
def test_world_size_follows_the_launcher(
    env: dict[str, str], expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from schedulearn.runtime import world_size

    for name in (
        "WORLD_SIZE",
        "HOROVOD_SIZE",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "SCHEDULEARN_NUM_GPUS",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert world_size() == expected


def test_bad_world_size_says_which_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from schedulearn.runtime import world_size

    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two'"):
        world_size()


def test_linear_scaling_rule() -> None:
    scaled = scale_for_world(per_worker_batch_size=32, base_learning_rate=0.1, world=4)
    assert scaled.global_batch_size == 128
    assert scaled.learning_rate == pytest.approx(0.4)
    halved = scale_for_world(32, 0.4, base_world_size=4, world=2)
    assert halved.global_batch_size == 64
    assert halved.learning_rate == pytest.approx(0.2)
    with pytest.raises(ValueError):
        scale_for_world(0, 0.1)


_LAUNCHER_VARS = (
    "RANK",
    "HOROVOD_RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "NODE_RANK",
    "LOCAL_RANK",
    "HOROVOD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
)


@pytest.mark.parametrize(
    ("env", "expected_rank", "expected_local"),
    [
        ({}, 0, 0),
        # torchrun: global and local rank
        ({"RANK": "5", "LOCAL_RANK": "1", "NODE_RANK": "2"}, 5, 1),
        # horovodrun (gloo) and mpirun
        ({"HOROVOD_RANK": "3", "HOROVOD_LOCAL_RANK": "3"}, 3, 3),
        ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, 2, 0),
        # a plain-Python gang: one process per node, numbered by the agent
        ({"NODE_RANK": "1"}, 1, 0),
    ],
)
def test_rank_follows_the_launcher(
    env: dict[str, str],
    expected_rank: int,
    expected_local: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from schedulearn import runtime

    for name in _LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert runtime.rank() == expected_rank
    assert runtime.local_rank() == expected_local
    assert runtime.is_main_process() is (expected_rank == 0)


def test_horovod_rank_one_neither_reports_nor_checkpoints(tmp_path: Path) -> None:
    progress = tmp_path / "progress.jsonl"
    env = {
        "SCHEDULEARN_CHECKPOINT_DIR": str(tmp_path / "c"),
        "SCHEDULEARN_PROGRESS_FILE": str(progress),
        "HOROVOD_RANK": "1",
        "HOROVOD_SIZE": "2",
    }
    proc = _run(tmp_path, 2, **env)
    out, _ = proc.communicate(timeout=10)
    assert "done at 2" in out
    assert not progress.exists()
    assert not (tmp_path / "c" / "checkpoint.pkl").exists()


def test_checkpoint_is_replaced_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from schedulearn import runtime

    monkeypatch.setenv("SCHEDULEARN_CHECKPOINT_DIR", str(tmp_path))
    for name in _LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    assert runtime.checkpoint_dir() == tmp_path
    assert runtime.load_checkpoint(default="none yet") == "none yet"
    runtime.save_checkpoint({"epoch": 1})
    runtime.save_checkpoint({"epoch": 2})
    assert runtime.load_checkpoint() == {"epoch": 2}
    # Only the checkpoint itself is left: no temporary file from either save.
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pkl"]


def test_report_drops_values_json_cannot_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from schedulearn import runtime

    progress = tmp_path / "p.jsonl"
    monkeypatch.setenv("SCHEDULEARN_PROGRESS_FILE", str(progress))
    for name in _LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    runtime.report(epoch=3, loss=float("nan"), accuracy=0.5, top5=0.9)
    (record,) = [json.loads(line) for line in progress.read_text().splitlines()]
    assert record["epoch"] == 3 and record["accuracy"] == 0.5 and record["top5"] == 0.9
    assert "loss" not in record
