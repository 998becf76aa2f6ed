"""The small library a training script imports to cooperate with Schedulearn.

    from schedulearn import runtime

    state = runtime.load_checkpoint(default=None)       # resume if a checkpoint exists
    for epoch in range(start, epochs):
        ...train one epoch...
        runtime.report(epoch=epoch, loss=loss, accuracy=acc)
        runtime.save_checkpoint({"epoch": epoch + 1, ...})
        if runtime.should_stop():                        # preempted: exit at a step boundary
            break

A job whose batch size may follow its allocation (the `goodput` policy
resizes it) uses `AdaptiveBatch` (`runtime.adaptive`): its batch size,
local batch, gradient accumulation and learning-rate scale for the
world it runs on now, and the step times and gradient statistics the
scheduler's goodput model needs, sent with its progress reports.

Everything here works in a plain Python process with no agent around
(it then costs a dictionary lookup or two), under `torchrun` and under
Horovod. It imports only the standard library (and the pure `core.goodput`, loaded
on first use of `AdaptiveBatch`).
"""

from typing import TYPE_CHECKING, Any

from schedulearn.runtime.checkpoint import checkpoint_dir, load_checkpoint, save_checkpoint
from schedulearn.runtime.env import is_main_process, job_id, local_rank, rank, world_size
from schedulearn.runtime.preemption import should_stop
from schedulearn.runtime.progress import report
from schedulearn.runtime.scaling import ScaledHyperparameters, scale_for_world

if TYPE_CHECKING:
    from schedulearn.runtime.adaptive import AdaptiveBatch


def __getattr__(name: str) -> Any:
    # Loaded on first use: a script that does not adapt its batch never pays for it.
    if name == "AdaptiveBatch":
        from schedulearn.runtime.adaptive import AdaptiveBatch

        return AdaptiveBatch
    raise AttributeError(f"module 'schedulearn.runtime' has no attribute {name!r}")


__all__ = [
    "AdaptiveBatch",
    "ScaledHyperparameters",
    "checkpoint_dir",
    "is_main_process",
    "job_id",
    "load_checkpoint",
    "local_rank",
    "rank",
    "report",
    "save_checkpoint",
    "scale_for_world",
    "should_stop",
    "world_size",
]
