"""Adaptive batch size and learning rate: what a script runs with after every resize.

    batch = runtime.AdaptiveBatch(init_batch=32, max_batch=512, max_local_batch=64,
                                  target=20 * len(data) / 32, state=saved.get("adaptive"))
    while not batch.done:
        ...batch.accum_steps + 1 micro-steps of batch.local_batch samples per process...
        set the optimiser's lr to base_lr * batch.lr_scale, step it
        batch.record_step(seconds, piece_sqr=..., mean_sqr=...)
        ...at an epoch's end: batch.report(loss=...); batch.adapt()...
    save({..., "adaptive": batch.state_dict()})

The scheduler resizes an elastic job by stopping it and starting it again
on a new number of GPUs. `AdaptiveBatch` tells the restarted script, for
its world now, the total batch, the local batch each process computes at
once and the gradient-accumulation steps (a local batch above
`max_local_batch`, what fits in a GPU's memory, is split into several
micro-steps), chosen to maximise the job's goodput with the same model
the scheduler uses (`core.goodput`: throughput fitted from the steps the
job measured, statistical efficiency from its gradient noise). The
learning rate follows AdaScale (Johnson et al., 2020; Pollux uses it):
a batch `s` times the initial one makes `gain` <= `s` times the progress
of one initial-batch step, so the rate is scaled by `lr_scale = gain`
and the job's progress is counted in steps at the initial batch
(`progress`); it ends at `target` whatever batches it ran, which is
what lets its result match a fixed-size run.

`record_step` takes each step's time and, for the gradient statistics,
the squared norms of the step's pieces (`runtime.gradnoise`); `report`
hands them to the agent with a progress report (rank 0 only), and on to
the scheduler. `state_dict()` goes into the script's checkpoint, so a
restarted job keeps what it learnt. Standard library only (and
`core.goodput`, which is pure).
"""

from __future__ import annotations

import math
import os
from typing import Any

from schedulearn.core.goodput import (
    BatchLimits,
    GoodputModel,
    GoodputReport,
    StepSample,
    fit_throughput,
    noise_ratio,
)
from schedulearn.runtime.env import world_size
from schedulearn.runtime.gradnoise import GradientNoise
from schedulearn.runtime.progress import report as _report

TIME_DECAY = 0.8  # weight of the past in a configuration's mean step time


def num_nodes(replicas: int) -> int:
    """How many machines the job's processes span: torchrun's group count, else one."""
    groups = os.environ.get("GROUP_WORLD_SIZE")
    if groups:
        return max(1, min(int(groups), replicas))
    local = os.environ.get("LOCAL_WORLD_SIZE")
    if local and int(local) > 0:
        return max(1, min(-(-replicas // int(local)), replicas))
    return 1


class AdaptiveBatch:
    """The batch configuration of this run of the job, and what it measures."""

    def __init__(
        self,
        init_batch: int,
        *,
        max_batch: int | None = None,
        max_local_batch: int | None = None,
        min_local_batch: int = 1,
        target: float | None = None,
        state: dict[str, Any] | None = None,
        replicas: int | None = None,
        nodes: int | None = None,
    ) -> None:
        """`init_batch`: the total batch the learning rate was tuned for; `max_batch`:
        the largest total batch allowed (default `init_batch`: no adaptation, only
        reports); `max_local_batch`/`min_local_batch`: what one process may compute
        at once; `target`: the progress (steps at `init_batch`) at which the job is
        done; `state`: a `state_dict()` of an earlier run of this job."""
        self.limits = BatchLimits(
            init_batch,
            max_batch if max_batch is not None else init_batch,
            min_local_batch,
            max_local_batch if max_local_batch is not None else 1 << 30,
        )
        if target is not None and not (math.isfinite(target) and target >= 0):
            raise ValueError(f"target must be a finite number >= 0, not {target}")
        self.replicas = replicas if replicas is not None else world_size()
        self.nodes = nodes if nodes is not None else num_nodes(self.replicas)
        if self.replicas < 1 or not 1 <= self.nodes <= self.replicas:
            raise ValueError(f"need 1 <= nodes <= replicas, not {self.nodes} and {self.replicas}")
        self.target = target
        state = state or {}
        self.progress = float(state.get("progress", 0.0))
        self.steps = int(state.get("steps", 0))
        self.noise = GradientNoise.restore(state.get("noise"))
        # (nodes, replicas, local batch, accumulation steps) -> [mean step time, mean sync time]
        self._times: dict[tuple[int, int, int, int], list[float]] = {
            (int(k[0]), int(k[1]), int(k[2]), int(k[3])): [float(v[0]), float(v[1])]
            for k, v in state.get("times", [])
        }
        self.batch_size, self.local_batch, self.accum_steps = self._choose()

    # --- the configuration ------------------------------------------------------

    def model(self) -> GoodputModel:
        """The job's goodput model from what it measured so far (the prior before that)."""
        fitted = tuple(
            StepSample.of_step(n, r, a, c, t, s) for (n, r, a, c), (t, s) in self._times.items()
        )
        params = fit_throughput(tuple(fitted)) if fitted else None
        return GoodputModel(self.limits, params, noise_ratio(self.noise.sqr, self._var()))

    def _var(self) -> float | None:
        return self.noise.var_at(self.limits.init_batch)

    def _choose(self) -> tuple[int, int, int]:
        choice = self.model().best(self.nodes, self.replicas)
        if choice is not None:
            return choice.batch, choice.atomic, choice.accum
        # No allowed batch on this many processes (more of them than max_batch /
        # min_local_batch): each takes the least it may; the batch exceeds the limit.
        return self.replicas * self.limits.min_local, self.limits.min_local, 0

    def adapt(self) -> bool:
        """Choose the batch again from what was learnt since; True if it changed.

        Call it where a change of batch is harmless (an epoch's end)."""
        chosen = self._choose()
        changed = chosen != (self.batch_size, self.local_batch, self.accum_steps)
        self.batch_size, self.local_batch, self.accum_steps = chosen
        return changed

    @property
    def lr_scale(self) -> float:
        """Factor for the learning rate tuned at `init_batch` (AdaScale's gain, 1 at it)."""
        noise = noise_ratio(self.noise.sqr, self._var())
        return GoodputModel(self.limits, None, noise).gain(self.batch_size)

    @property
    def done(self) -> bool:
        return self.target is not None and self.progress >= self.target

    # --- measurements -----------------------------------------------------------

    def record_step(
        self,
        step_time: float,
        *,
        sync_time: float = 0.0,
        piece_sqr: float | None = None,
        mean_sqr: float | None = None,
        piece_batch: float | None = None,
        pieces: int | None = None,
    ) -> float:
        """Count one optimiser step; returns the progress it made (its `lr_scale`).

        `step_time`: seconds of the whole step (every micro-step and the
        synchronisation), `sync_time` the synchronisation's part. The
        gradient statistics need `piece_sqr` (the mean squared norm of the
        pieces' gradients: each process's each micro-step, by default
        `replicas * (accum_steps + 1)` pieces of `local_batch` samples) and
        `mean_sqr` (the squared norm of their mean, the gradient applied).
        """
        if not (math.isfinite(step_time) and step_time >= 0):
            raise ValueError(f"step_time must be a finite number >= 0, not {step_time}")
        gain = self.lr_scale  # the rate this step was taken with
        self.progress += gain
        self.steps += 1
        key = (self.nodes, self.replicas, self.local_batch, self.accum_steps)
        sync = max(0.0, min(sync_time, step_time))
        kept = self._times.get(key)
        if kept is None:
            self._times[key] = [step_time, sync]
        else:
            kept[0] = TIME_DECAY * kept[0] + (1 - TIME_DECAY) * step_time
            kept[1] = TIME_DECAY * kept[1] + (1 - TIME_DECAY) * sync
        if piece_sqr is not None and mean_sqr is not None:
            self.noise.update(
                piece_sqr,
                mean_sqr,
                piece_batch if piece_batch is not None else self.local_batch,
                pieces if pieces is not None else self.replicas * (self.accum_steps + 1),
            )
        return gain

    def goodput_report(self) -> GoodputReport:
        """What the scheduler is told (`protocol.ProgressReport.goodput`)."""
        times = self._times.get((self.nodes, self.replicas, self.local_batch, self.accum_steps))
        return GoodputReport(
            init_batch=self.limits.init_batch,
            max_batch=self.limits.max_batch,
            min_local_batch=self.limits.min_local,
            max_local_batch=self.limits.max_local,
            batch_size=self.batch_size,
            local_batch=self.local_batch,
            accum_steps=self.accum_steps,
            replicas=self.replicas,
            nodes=self.nodes,
            lr_scale=self.lr_scale,
            step_time=None if times is None else times[0],
            sync_time=0.0 if times is None else min(times[1], times[0]),
            grad_sqr=self.noise.sqr,
            grad_var=self._var(),
            progress=self.progress,
            target=self.target,
        )

    def report(self, **fields: Any) -> None:
        """`runtime.report(**fields)` with this run's goodput report (rank 0 only)."""
        _report(goodput=self.goodput_report(), **fields)

    def state_dict(self) -> dict[str, Any]:
        """Plain data (picklable, JSON-able) for the script's checkpoint."""
        return {
            "progress": self.progress,
            "steps": self.steps,
            "noise": self.noise.state(),
            "times": [[list(k), list(v)] for k, v in self._times.items()],
        }

    def describe(self) -> str:
        """One line for the script's log: the configuration and the learning-rate scale."""
        accum = f", {self.accum_steps} accumulation steps" if self.accum_steps else ""
        return (
            f"adaptive batch on {self.replicas} GPUs: batch size {self.batch_size} "
            f"({self.local_batch} per GPU{accum}), lr scale {self.lr_scale:.4g}"
        )
