"""What a goodput-aware policy learns about each job in the simulator, as a live host knows it.

A job under Pollux's AdaptDL library (or `schedulearn.runtime` live)
reports its measured step times, its gradient statistics, its progress
and, when its spec declares one, its total; the scheduler fits its
goodput model from those reports. `GoodputFeed` hands each pass one
`core.goodput.JobGoodput` per active job that names a measured
application (`ClusterView.goodput`), built by `JobGoodput.of_report`
from the job's `GoodputReport` (`sim.job_learning`), exactly as the
live scheduler builds it: nothing the live system could not know
reaches the policy (tests/unit/sim/test_information.py).

A policy asks for the feed by setting the class attribute
`uses_goodput = True`; other policies pay nothing for it. The feed owns
nothing: the job's observations are `JobLearning`'s, the run state the
engine's.
"""

from __future__ import annotations

from collections.abc import Iterable

from schedulearn.core.goodput import JobGoodput
from schedulearn.sim.job_learning import JobLearning
from schedulearn.sim.runstate import RunState


class GoodputFeed:
    """The `JobGoodput` of every active job, from what it reported."""

    def __init__(self, learning: JobLearning) -> None:
        self.learning = learning

    @classmethod
    def wanted(cls, learning: JobLearning | None, policy: object) -> GoodputFeed | None:
        """A feed when the policy uses one and the speed model has measured tables."""
        if learning is None or not getattr(policy, "uses_goodput", False):
            return None
        return cls(learning)

    def snapshot(
        self, t: float, runs: dict[int, RunState], ids: Iterable[int]
    ) -> dict[int, JobGoodput]:
        """One `JobGoodput` per job in `ids` that names a measured application."""
        out: dict[int, JobGoodput] = {}
        learning = self.learning
        for jid in ids:
            run = runs[jid]
            done = run.done
            if run.placement is not None and run.curve is not None:
                done = min(run.work, run.curve.advance(run.done, max(0.0, t - run.ready)))
                learning.observe(run, done)
            info = learning.goodput(run, done)
            if info is not None:
                out[jid] = info
        return out
