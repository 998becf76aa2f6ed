"""Launchers: the exact command lines and environments a job starts with."""

from __future__ import annotations

from typing import Any

import pytest

from schedulearn.agent.launchers import (
    STOP_TRAPS,
    LaunchError,
    command_argv,
    horovod_argv,
    plan_launch,
    torchrun_argv,
)
from schedulearn.protocol import Assignment, GangInfo


def assignment(**kw: Any) -> Assignment:
    base: dict[str, Any] = {"job_id": 17, "attempt": 2, "command": ["python", "train.py"]}
    return Assignment(**{**base, **kw})


def test_a_shell_string_runs_under_sh_and_an_argv_as_it_is() -> None:
    assert command_argv("echo $HOME && ls") == ["/bin/sh", "-c", STOP_TRAPS + "echo $HOME && ls"]
    assert command_argv(["python", "-u", "t.py"]) == ["python", "-u", "t.py"]


def test_launcher_none_sets_the_job_environment() -> None:
    plan = plan_launch(assignment(gpus=[2, 3], env={"LR": "0.1"}), "/ckpt/17")
    assert plan.argv == ("python", "train.py")
    assert plan.env == {
        "LR": "0.1",
        "CUDA_VISIBLE_DEVICES": "2,3",
        "SCHEDULEARN_JOB_ID": "17",
        "SCHEDULEARN_NUM_GPUS": "2",
        "SCHEDULEARN_CHECKPOINT_DIR": "/ckpt/17",
    }


def test_the_job_cannot_override_the_gpus_it_was_given() -> None:
    plan = plan_launch(
        assignment(gpus=[1], env={"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SCHEDULEARN_NUM_GPUS": "4"}),
        "/c",
    )
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert plan.env["SCHEDULEARN_NUM_GPUS"] == "1"


def test_a_cpu_only_job_sees_no_gpu() -> None:
    plan = plan_launch(assignment(gpus=[]), "/c")
    assert plan.env["CUDA_VISIBLE_DEVICES"] == ""
    assert plan.env["SCHEDULEARN_NUM_GPUS"] == "0"


def test_containers_also_get_nvidia_visible_devices() -> None:
    plain = plan_launch(assignment(gpus=[2, 3]), "/schedulearn/checkpoint", in_container=True)
    assert plain.env["NVIDIA_VISIBLE_DEVICES"] == "2,3"
    assert plain.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    # With NVIDIA device requests the container sees only its GPUs, from 0.
    renumbered = plan_launch(
        assignment(gpus=[2, 3]), "/schedulearn/checkpoint", in_container=True, renumber_gpus=True
    )
    assert renumbered.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert renumbered.env["NVIDIA_VISIBLE_DEVICES"] == "2,3"
    none = plan_launch(assignment(gpus=[]), "/c", in_container=True)
    assert none.env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_single_node_torchrun_runs_one_worker_per_gpu_standalone() -> None:
    plan = plan_launch(
        assignment(
            launcher="torchrun", gpus=[0, 1, 2, 3], command=["python", "train.py", "--lr", "3"]
        ),
        "/c",
    )
    assert plan.argv == (
        "torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=4", "train.py", "--lr", "3",
    )  # fmt: skip
    for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK"):
        assert name not in plan.env


def test_multi_node_torchrun_gets_the_rendezvous_flags_and_variables() -> None:
    gang = GangInfo(
        world_size=2, node_rank=1, master_addr="10.0.0.5", master_port=29517, nproc_per_node=4
    )
    plan = plan_launch(
        assignment(
            launcher="torchrun",
            gpus=[4, 5, 6, 7],
            gang=gang,
            command="python3 -m trainer.main --epochs 3",
        ),
        "/c",
    )
    assert plan.argv == (
        "torchrun", "--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.5",
        "--master_port=29517", "--nproc_per_node=4", "-m", "trainer.main", "--epochs", "3",
    )  # fmt: skip
    assert plan.env["MASTER_ADDR"] == "10.0.0.5"
    assert plan.env["MASTER_PORT"] == "29517"
    assert plan.env["WORLD_SIZE"] == "2"
    assert plan.env["NODE_RANK"] == "1"
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"


def test_a_gang_without_a_launcher_still_gets_the_rendezvous_variables() -> None:
    gang = GangInfo(
        world_size=3, node_rank=0, master_addr="n0", master_port=29501, nproc_per_node=2
    )
    plan = plan_launch(assignment(gpus=[0, 1], gang=gang, command=["./run.sh"]), "/c")
    assert plan.argv == ("./run.sh",)
    assert (plan.env["WORLD_SIZE"], plan.env["NODE_RANK"]) == ("3", "0")
    assert (plan.env["MASTER_ADDR"], plan.env["MASTER_PORT"]) == ("n0", "29501")


def test_torchrun_runs_non_python_programs_with_no_python() -> None:
    assert torchrun_argv(["./bench", "-n", "3"], 2) == [
        "torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=2", "--no-python",
        "./bench", "-n", "3",
    ]  # fmt: skip
    assert torchrun_argv(["train.py"], 1)[-1] == "train.py"
    assert torchrun_argv(["/usr/bin/python3.11", "t.py"], 1)[-1] == "t.py"


def test_torchrun_of_a_bare_python_is_refused() -> None:
    with pytest.raises(LaunchError, match="names python but no script"):
        torchrun_argv(["python"], 1)


def test_horovod_runs_n_processes_on_this_host() -> None:
    plan = plan_launch(assignment(launcher="horovod", gpus=[0, 1, 2]), "/c")
    assert plan.argv == ("horovodrun", "-np", "3", "-H", "localhost:3", "python", "train.py")
    assert horovod_argv("python t.py --x 'a b'", 2) == [
        "horovodrun", "-np", "2", "-H", "localhost:2", "python", "t.py", "--x", "a b",
    ]  # fmt: skip


def test_horovod_over_several_nodes_is_refused_with_what_to_change() -> None:
    gang = GangInfo(world_size=2, node_rank=0, master_addr="a", master_port=1, nproc_per_node=4)
    with pytest.raises(LaunchError, match="use launcher torchrun"):
        plan_launch(assignment(launcher="horovod", gpus=[0, 1, 2, 3], gang=gang), "/c")


def test_an_empty_command_is_refused() -> None:
    with pytest.raises(LaunchError, match="command is empty"):
        command_argv([])
