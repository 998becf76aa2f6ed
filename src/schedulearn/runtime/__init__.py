"""The small library a training script imports to cooperate with Schedulearn.

    from schedulearn import runtime

    state = runtime.load_checkpoint(default=None)       # resume if a checkpoint exists
    for epoch in range(start, epochs):
        ...train one epoch...
        runtime.report(epoch=epoch, loss=loss, accuracy=acc)
        runtime.save_checkpoint({"epoch": epoch + 1, ...})
        if runtime.should_stop():                        # preempted: exit at a step boundary
            break

Everything here works in a plain Python process with no agent around
(it then costs a dictionary lookup or two), under `torchrun` and under
Horovod. It imports only the standard library.
"""

from schedulearn.runtime.checkpoint import checkpoint_dir, load_checkpoint, save_checkpoint
from schedulearn.runtime.env import is_main_process, job_id, local_rank, rank, world_size
from schedulearn.runtime.preemption import should_stop
from schedulearn.runtime.progress import report
from schedulearn.runtime.scaling import ScaledHyperparameters, scale_for_world

__all__ = [
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
