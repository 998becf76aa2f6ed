"""Checkpoints: where to keep them, and saving them so a crash never leaves half a file.

`checkpoint_dir()` is the directory the agent gives the job
(`SCHEDULEARN_CHECKPOINT_DIR`); it moves with the job when the job is
preempted and resumed elsewhere. Outside Schedulearn it is
`./checkpoints`. `save_checkpoint` pickles to a temporary file and
renames it over the old one, so a checkpoint is either the old one or
the new one, whatever moment the job is stopped at. Frameworks with
their own formats write into `checkpoint_dir()` the same way (e.g.
`torch.save` to a temporary name, then `os.replace`).
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from schedulearn.runtime.env import CHECKPOINT_DIR, is_main_process

DEFAULT_NAME = "checkpoint.pkl"


def checkpoint_dir() -> Path:
    """The job's checkpoint directory, created if missing."""
    path = Path(os.environ.get(CHECKPOINT_DIR) or "checkpoints")
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_checkpoint(state: Any, name: str = DEFAULT_NAME) -> Path | None:
    """Atomically pickle `state` into the checkpoint directory (rank 0 only)."""
    if not is_main_process():
        return None
    target = checkpoint_dir() / name
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            pickle.dump(state, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load_checkpoint(default: Any = None, name: str = DEFAULT_NAME) -> Any:
    """The last saved state, or `default` when there is none yet."""
    path = checkpoint_dir() / name
    if not path.exists():
        return default
    with path.open("rb") as src:
        return pickle.load(src)  # the job reads back its own checkpoint
