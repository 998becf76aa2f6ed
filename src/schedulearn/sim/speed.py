"""How fast a job progresses on the GPUs it was given: the simulator's speed model.

A job carries an amount of work. Its work is measured in seconds at
its requested size on the best placement, so a rigid job that gets
what it asked for on as few nodes as possible runs exactly its
`duration`. While it runs on a placement, a `Curve` says how its work
advances with time; the engine asks a curve two questions only: how
long from `done` to the end, and how much is done after `s` seconds.

The default (`LinearSpeed`) rate of a job on a placement is the
product of three factors:

- size: `speedup(n) / speedup(requested)` with `speedup(n) = 1 +
  efficiency * (n - 1)` (linear scaling with an efficiency factor);
- spread: `1 / (1 + spread_penalty * extra_nodes)`, where
  `extra_nodes` counts the nodes beyond the fewest that could hold
  that many GPUs (cross-node traffic is the expensive part);
- GPU type: the slowest of the placement's GPU types under a
  `GpuSpeed` table (the seam for per-model throughput tables, issue 6;
  the default treats all types alike).

Jobs that name an application with measured tables use
`schedulearn.sim.measured` instead. Every (re)start costs time without
progress: `start_cost` for a first start, `restart_cost` for a resume
after preemption or a resize (checkpoint and restore).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from schedulearn.core.views import NodeView, Placement
from schedulearn.sim.jobs import SimInputError, SimJob


class Curve(Protocol):
    """Progress of one job on one placement, from a given amount of work done."""

    def seconds_to(self, done: float, target: float) -> float:
        """Seconds of running to go from `done` to `target` units of work."""
        ...

    def advance(self, done: float, seconds: float) -> float:
        """Work done after running `seconds` more, starting from `done`."""
        ...


@dataclass(frozen=True, slots=True)
class ConstantRate:
    """A curve with a fixed rate (units of work per second)."""

    rate: float

    def seconds_to(self, done: float, target: float) -> float:
        return max(0.0, target - done) / self.rate

    def advance(self, done: float, seconds: float) -> float:
        return done + self.rate * seconds


class SpeedModel(Protocol):
    """What the engine asks of a speed model."""

    def work(self, job: SimJob) -> float:
        """The job's total work, in the model's units."""
        ...

    def curve(self, job: SimJob, placement: Placement, shape: ClusterShape) -> Curve:
        """How the job progresses while it runs on `placement`."""
        ...

    def switch_cost(self, job: SimJob, first: bool) -> float:
        """Seconds without progress after a first start (`first`) or a resume/resize."""
        ...

    def estimate(self, job: SimJob, shape: ClusterShape) -> float:
        """Seconds the job runs alone at its requested size on the fewest nodes."""
        ...


class GpuSpeed(Protocol):
    """Relative speed of a model on a GPU type (1.0 = the trace's reference GPU)."""

    def factor(self, model: str | None, gpu_type: str) -> float: ...


@dataclass(frozen=True, slots=True)
class TypeFactors:
    """One speed factor per GPU type, the same for every model; unknown types run at 1.0.

    Per-model throughput tables (issue 6) implement `GpuSpeed` too and
    plug in at the same place.
    """

    factors: dict[str, float] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> TypeFactors:
        """Parse `k80=0.3,v100=1`."""
        factors: dict[str, float] = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = item.partition("=")
            try:
                number = float(value)
            except ValueError:
                number = -1.0
            if not sep or number <= 0:
                raise SimInputError(
                    f"bad GPU speed {item!r}; write TYPE=FACTOR with a positive factor, "
                    "e.g. k80=0.3,v100=1"
                )
            factors[name.strip().lower()] = number
        return cls(factors)

    def factor(self, model: str | None, gpu_type: str) -> float:
        return self.factors.get(gpu_type.lower(), 1.0)


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """What a speed model needs to know of the cluster: node sizes and GPU types."""

    gpu_type: dict[str, str]
    node_sizes: tuple[int, ...]
    # fewest_nodes[n]: the fewest nodes whose GPUs add up to n (biggest first).
    fewest_nodes: tuple[int, ...]

    @classmethod
    def of(cls, nodes: tuple[NodeView, ...]) -> ClusterShape:
        sizes = sorted((n.num_gpus for n in nodes), reverse=True)
        fewest = [0]
        total, used = 0, 0
        for size in sizes:
            if size <= 0:
                continue
            used += 1
            for _ in range(size):
                total += 1
                fewest.append(used)
        return cls({n.name: n.gpu_type for n in nodes}, tuple(sizes), tuple(fewest))

    def min_nodes(self, gpus: int) -> int:
        if gpus < len(self.fewest_nodes):
            return self.fewest_nodes[gpus]
        return self.fewest_nodes[-1] if self.fewest_nodes else 1


@dataclass(frozen=True, slots=True)
class LinearSpeed:
    """The default speed model; see the module docstring for the formula."""

    efficiency: float = 0.9
    spread_penalty: float = 0.1
    start_cost: float = 0.0
    restart_cost: float = 30.0
    gpu_speed: GpuSpeed = field(default_factory=TypeFactors)

    def __post_init__(self) -> None:
        if not 0.0 < self.efficiency <= 1.0:
            raise SimInputError(f"efficiency must be in (0, 1], not {self.efficiency}")
        if self.spread_penalty < 0 or self.start_cost < 0 or self.restart_cost < 0:
            raise SimInputError("spread penalty and suspend/resume costs must not be negative")

    def speedup(self, gpus: int) -> float:
        return 1.0 + self.efficiency * (gpus - 1) if gpus > 0 else 1.0

    def rate(self, job: SimJob, placement: Placement, shape: ClusterShape) -> float:
        """Units of work (seconds at the requested size) per second on `placement`."""
        n = placement.num_gpus
        rate = self.speedup(n) / self.speedup(job.gpus) if n != job.gpus else 1.0
        extra = placement.num_nodes - shape.min_nodes(n)
        if extra > 0 and self.spread_penalty:
            rate /= 1.0 + self.spread_penalty * extra
        gpu_speed = self.gpu_speed
        # An empty factor table (the default) rates every type 1.0: skip the lookups.
        if n and not (isinstance(gpu_speed, TypeFactors) and not gpu_speed.factors):
            types = {shape.gpu_type.get(name, "") for name, gpus in placement if gpus}
            rate *= min(gpu_speed.factor(job.model, t) for t in types)
        return rate

    def work(self, job: SimJob) -> float:
        if job.duration is None:
            raise SimInputError(
                f"job {job.name or job.id} has no duration and no measured application; "
                "give it a duration, or an app with --apps pointing at the Pollux tables"
            )
        return job.duration

    def curve(self, job: SimJob, placement: Placement, shape: ClusterShape) -> Curve:
        return _constant(self.rate(job, placement, shape))

    def switch_cost(self, job: SimJob, first: bool) -> float:
        return self.start_cost if first else self.restart_cost

    def estimate(self, job: SimJob, shape: ClusterShape) -> float:
        return self.work(job)


_CURVES: dict[float, ConstantRate] = {}


def _constant(rate: float) -> ConstantRate:
    # Most jobs run at rate 1.0; share the curve objects instead of making one per start.
    curve = _CURVES.get(rate)
    if curve is None:
        if not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"a job's rate must be positive, not {rate}")
        curve = ConstantRate(rate)
        if len(_CURVES) < 4096:
            _CURVES[rate] = curve
    return curve
