"""What a goodput-aware policy learns about each job in the simulator, as a live runtime reports it.

A job under Pollux's AdaptDL library measures its step times on every
allocation it runs on and its gradient statistics as it trains; the
scheduler fits its goodput model from those reports. `GoodputFeed`
plays that part for the simulator: for every job that names a measured
application it keeps the distinct steps measured so far (from the
tables, at the placements and batches the job actually ran) and its
latest gradient statistics, and hands each pass a
`core.goodput.JobGoodput` per active job (`ClusterView.goodput`).

A policy asks for the feed by setting the class attribute
`uses_goodput = True`; other policies pay nothing for it. The feed owns
only these per-job observations; the engine owns the run state.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from schedulearn.core.goodput import BatchLimits, JobGoodput, StepSample
from schedulearn.core.views import Placement
from schedulearn.sim.measured import MeasuredSpeed
from schedulearn.sim.runstate import RunState
from schedulearn.sim.speed import SpeedModel


class GoodputFeed:
    """Per-job observations of steps and gradient statistics."""

    def __init__(self, speed: MeasuredSpeed) -> None:
        self.speed = speed
        self._samples: dict[int, dict[tuple[int, int, int], StepSample]] = {}
        self._grad: dict[int, tuple[float, float]] = {}
        self._limits: dict[int, BatchLimits | None] = {}
        # The (placement, epoch) each job's sample and statistics were last read at.
        self._seen: dict[int, tuple[Placement, int]] = {}

    @classmethod
    def wanted(cls, speed: SpeedModel, policy: object) -> GoodputFeed | None:
        """A feed when the policy uses one and the speed model has measured tables."""
        if not getattr(policy, "uses_goodput", False) or not isinstance(speed, MeasuredSpeed):
            return None
        return cls(speed) if speed.apps else None

    def _limits_of(self, run: RunState) -> BatchLimits | None:
        jid = run.job.id
        if jid not in self._limits:
            tables = self.speed.tables_of(run.job) if run.job.app else None
            self._limits[jid] = None if tables is None else tables.limits(run.job.batch_size)
        return self._limits[jid]

    def snapshot(
        self, t: float, runs: dict[int, RunState], ids: Iterable[int]
    ) -> dict[int, JobGoodput]:
        """One `JobGoodput` per job in `ids` that names a measured application."""
        out: dict[int, JobGoodput] = {}
        for jid in ids:
            run = runs[jid]
            limits = self._limits_of(run)
            if limits is None:
                continue
            done = run.done
            placement = run.placement
            if placement is not None and run.curve is not None:
                done = min(run.work, run.curve.advance(run.done, max(0.0, t - run.ready)))
                # Steps and statistics change only with the placement and the epoch.
                epoch = bisect.bisect_right(self._ends(run), done)
                if self._seen.get(jid) == (placement, epoch):
                    out[jid] = self._report(run, limits, done)
                    continue
                self._seen[jid] = (placement, epoch)
                sample = self.speed.sample(run.job, placement, done)
                if sample is not None:
                    # One sample per half-octave of local batch and allocation: a
                    # runtime's profile is as coarse, and each new sample means a refit.
                    bucket = round(2 * math.log2(max(sample.atomic_bsz, 1)))
                    key = (sample.nodes, sample.replicas, bucket)
                    self._samples.setdefault(jid, {}).setdefault(key, sample)
                grad = self.speed.grad_stats(run.job, placement, done)
                if grad is not None:
                    self._grad[jid] = grad
            out[jid] = self._report(run, limits, done)
        return out

    def _ends(self, run: RunState) -> tuple[float, ...]:
        tables = self.speed.tables_of(run.job)
        return tables.epoch_ends if tables is not None else ()

    def _report(self, run: RunState, limits: BatchLimits, done: float) -> JobGoodput:
        jid = run.job.id
        samples = self._samples.get(jid)
        grad = self._grad.get(jid)
        return JobGoodput(
            limits,
            tuple(samples.values()) if samples else (),
            grad[0] if grad else None,
            grad[1] if grad else None,
            max(0.0, run.work - done),
            max(0, run.preemptions + run.resizes + run.migrations),
        )
