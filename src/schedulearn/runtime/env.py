"""Where this process stands in its job: rank and world size, whatever launched it.

Reads the variables set by `torchrun` (`RANK`, `WORLD_SIZE`,
`LOCAL_RANK`), by Horovod/Open MPI (`HOROVOD_RANK`, `OMPI_COMM_WORLD_RANK`,
...) and by the Schedulearn agent (`NODE_RANK` and `WORLD_SIZE` for a
gang over several nodes, `SCHEDULEARN_NUM_GPUS`), in that order of
precedence: a launcher's own numbering wins over the agent's.
"""

from __future__ import annotations

import os

# NODE_RANK last: without a launcher, a multi-node gang runs one process per
# node, and the agent numbers the nodes.
_RANK_VARS = ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "NODE_RANK")
_LOCAL_RANK_VARS = (
    "LOCAL_RANK",
    "HOROVOD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
)
_SIZE_VARS = ("WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")

JOB_ID = "SCHEDULEARN_JOB_ID"
NUM_GPUS = "SCHEDULEARN_NUM_GPUS"
CHECKPOINT_DIR = "SCHEDULEARN_CHECKPOINT_DIR"
PROGRESS_FILE = "SCHEDULEARN_PROGRESS_FILE"


def _first_int(names: tuple[str, ...]) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise ValueError(
                    f"environment variable {name}={value!r} is not a whole number"
                ) from None
    return None


def rank() -> int:
    """This process's rank among the job's processes (0 when alone)."""
    return _first_int(_RANK_VARS) or 0


def local_rank() -> int:
    """This process's rank on its own node (0 when alone): which of the node's GPUs it drives."""
    return _first_int(_LOCAL_RANK_VARS) or 0


def world_size() -> int:
    """How many processes train together: the launcher's count, else the job's GPUs, else 1.

    A job the scheduler resized sees its new size here after it restarts.
    """
    size = _first_int(_SIZE_VARS)
    if size is None:
        size = _first_int((NUM_GPUS,))
    return max(1, size or 1)


def is_main_process() -> bool:
    """True on rank 0, the process that reports progress and writes checkpoints."""
    return rank() == 0


def job_id() -> str | None:
    """The Schedulearn job id, or None when not run by an agent."""
    return os.environ.get(JOB_ID) or None
