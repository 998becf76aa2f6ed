"""Job-level adaptation: the linear scaling rule for batch size and learning rate.

When the scheduler resizes an elastic job, the script restarts with a
different world size. Keeping the per-GPU batch fixed, the global batch
grows with the world size, and the learning rate scales by the same
factor (Goyal et al., "Accurate, Large Minibatch SGD", 2017).
"""

from __future__ import annotations

from dataclasses import dataclass

from schedulearn.runtime.env import world_size


@dataclass(frozen=True)
class ScaledHyperparameters:
    world_size: int
    global_batch_size: int
    per_worker_batch_size: int
    learning_rate: float


def scale_for_world(
    per_worker_batch_size: int,
    base_learning_rate: float,
    base_world_size: int = 1,
    world: int | None = None,
) -> ScaledHyperparameters:
    """Hyperparameters for `world` workers (default: this job's world size now).

    `base_learning_rate` is the rate tuned for `base_world_size` workers
    at `per_worker_batch_size` each.
    """
    if per_worker_batch_size < 1 or base_world_size < 1:
        raise ValueError("batch size and base world size must be 1 or more")
    size = world_size() if world is None else world
    factor = size / base_world_size
    return ScaledHyperparameters(
        world_size=size,
        global_batch_size=per_worker_batch_size * size,
        per_worker_batch_size=per_worker_batch_size,
        learning_rate=base_learning_rate * factor,
    )
