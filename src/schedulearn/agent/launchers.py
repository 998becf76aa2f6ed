"""Launchers: the command line and environment a job's process starts with.

An assignment names a launcher (`none`, `torchrun`, `horovod`); this
module turns it, the job's command and its GPUs into a `LaunchPlan`:
the argv the executor runs and the environment the job sees. Nothing here
starts a process, so every command line can be checked in a test.

Environment (DESIGN.md section 3): `CUDA_VISIBLE_DEVICES`,
`SCHEDULEARN_JOB_ID`, `SCHEDULEARN_NUM_GPUS`, `SCHEDULEARN_CHECKPOINT_DIR`,
`SCHEDULEARN_PROGRESS_FILE` (where `runtime.report` writes),
and for a gang over several nodes `MASTER_ADDR`, `MASTER_PORT`,
`WORLD_SIZE` (the number of nodes) and `NODE_RANK`. In a container also
`NVIDIA_VISIBLE_DEVICES`. The job's own `env` cannot override these: they
are how a job is kept to its GPUs. Under them: the job's own `env`, and
under that the variables the agent's admin gave every job (`--env`,
`node_env`); `agent.jobenv` builds what a process job starts from below
these (docs/job-environment.md has the whole order).

A string command runs under `/bin/sh -c`, behind `STOP_TRAPS`: a stop is
a SIGTERM to the job's whole process group (the process executor signals
the group; in a container the init forwards it to the group), so the
user's program gets it directly. The shell must then neither die at once
(its exit would end the run, and the agent would kill the program before
it saved) nor go on to the next command: a trap set to a command is only
run once the foreground program has ended, and then exits as a shell
killed by that signal would (143 for SIGTERM). Programs the shell starts
get the default dispositions back (a caught signal is reset on exec), so
they handle SIGTERM as they would in argv form.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from schedulearn.protocol import (
    ENV_CHECKPOINT_DIR,
    ENV_JOB_ID,
    ENV_NUM_GPUS,
    ENV_PROGRESS_FILE,
    Assignment,
    Launcher,
)

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
# Put before a string command: the shell outlives a stop signal until its
# foreground program has ended, then stops (see the module docstring). On the
# same line as the command, so the shell's error messages keep its line numbers.
STOP_TRAPS = "trap 'exit 143' TERM; trap 'exit 130' INT; trap 'exit 129' HUP; "


class LaunchError(ValueError):
    """The job cannot be launched as asked; the message says what to change."""


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """What to run and with which environment (the job's, not the agent's)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]


def command_argv(command: Sequence[str] | str) -> list[str]:
    """A job's command as argv: a shell string runs under `/bin/sh -c`, behind
    `STOP_TRAPS` so that a stop reaches the program and the shell waits for it."""
    if isinstance(command, str):
        return ["/bin/sh", "-c", STOP_TRAPS + command]
    if not command:
        raise LaunchError("the job's command is empty; give an argv list or a shell string")
    return list(command)


def _script_argv(command: Sequence[str] | str) -> list[str]:
    """The command split into words, for launchers that take a program and its args."""
    words = shlex.split(command) if isinstance(command, str) else list(command)
    if not words:
        raise LaunchError("the job's command is empty; give an argv list or a shell string")
    return words


def torchrun_argv(
    command: Sequence[str] | str,
    nproc_per_node: int,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
) -> list[str]:
    """`torchrun … script args`: one worker process per GPU.

    torchrun runs Python scripts itself, so a leading `python`/`python3` is
    dropped (`python -m pkg` becomes `torchrun … -m pkg`); any other program
    runs with `--no-python`.
    """
    words = _script_argv(command)
    flags: list[str] = []
    if nnodes > 1:
        if master_addr is None or master_port is None:
            raise LaunchError("a multi-node torchrun job needs a master address and port")
        flags += [
            f"--nnodes={nnodes}",
            f"--node_rank={node_rank}",
            f"--master_addr={master_addr}",
            f"--master_port={master_port}",
        ]
    else:
        # --standalone picks a free local rendezvous port, so two single-node
        # jobs on one host never collide on torchrun's default port 29500.
        flags += ["--standalone", "--nnodes=1"]
    flags.append(f"--nproc_per_node={nproc_per_node}")
    program = os.path.basename(words[0])
    if _PYTHON.match(program):
        script = words[1:]
        if not script:
            raise LaunchError("the torchrun job's command names python but no script")
    elif words[0].endswith(".py") or words[0] == "-m":
        script = words
    else:
        flags.append("--no-python")
        script = words
    return ["torchrun", *flags, *script]


def horovod_argv(command: Sequence[str] | str, num_proc: int) -> list[str]:
    """`horovodrun -np N -H localhost:N program args`: N processes on this host."""
    words = _script_argv(command)
    return ["horovodrun", "-np", str(num_proc), "-H", f"localhost:{num_proc}", *words]


def job_env(
    assignment: Assignment,
    checkpoint_dir: str,
    in_container: bool = False,
    renumber_gpus: bool = False,
    progress_file: str | None = None,
    node_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables Schedulearn sets for a job, on top of the job's own `env`,
    on top of the agent's `--env` (`node_env`).

    `renumber_gpus`: the container runtime hands the container only its GPUs,
    numbered from 0 (NVIDIA device requests), so CUDA must count from 0 too.
    """
    gpus = [str(g) for g in assignment.gpus]
    visible = ",".join(str(i) for i in range(len(gpus))) if renumber_gpus else ",".join(gpus)
    # Secret values go only into the job's environment, never into a log line.
    env = {**(node_env or {}), **assignment.env, **assignment.secret_env}
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": visible,
            ENV_JOB_ID: str(assignment.job_id),
            ENV_NUM_GPUS: str(len(gpus)),
            ENV_CHECKPOINT_DIR: checkpoint_dir,
        }
    )
    if progress_file is not None:
        env[ENV_PROGRESS_FILE] = progress_file
    if in_container:
        # "void" hides every GPU from the NVIDIA runtime; an empty value
        # would mean "the default", which may be all of them.
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(gpus) if gpus else "void"
    gang = assignment.gang
    if gang is not None:
        env.update(
            {
                "MASTER_ADDR": gang.master_addr,
                "MASTER_PORT": str(gang.master_port),
                "WORLD_SIZE": str(gang.world_size),
                "NODE_RANK": str(gang.node_rank),
            }
        )
    return env


def plan_launch(
    assignment: Assignment,
    checkpoint_dir: str,
    in_container: bool = False,
    renumber_gpus: bool = False,
    progress_file: str | None = None,
    node_env: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """The argv and environment of `assignment`'s process on this node."""
    env = job_env(assignment, checkpoint_dir, in_container, renumber_gpus, progress_file, node_env)
    gang = assignment.gang
    local_gpus = len(assignment.gpus)
    if assignment.launcher is Launcher.NONE:
        argv = command_argv(assignment.command)
    elif assignment.launcher is Launcher.TORCHRUN:
        nproc = gang.nproc_per_node if gang is not None else max(1, local_gpus)
        if gang is not None and gang.world_size > 1:
            argv = torchrun_argv(
                assignment.command,
                nproc,
                nnodes=gang.world_size,
                node_rank=gang.node_rank,
                master_addr=gang.master_addr,
                master_port=gang.master_port,
            )
        else:
            argv = torchrun_argv(assignment.command, nproc)
    elif assignment.launcher is Launcher.HOROVOD:
        if gang is not None and gang.world_size > 1:
            raise LaunchError(
                f"the horovod launcher runs on one node, and job {assignment.job_id} spans "
                f"{gang.world_size} nodes; ask for no more GPUs than one node has, "
                "or use launcher torchrun for multi-node jobs"
            )
        argv = horovod_argv(assignment.command, max(1, local_gpus))
    else:  # pragma: no cover - the enum has no other members
        raise LaunchError(f"unknown launcher {assignment.launcher!r}")
    return LaunchPlan(tuple(argv), env)
