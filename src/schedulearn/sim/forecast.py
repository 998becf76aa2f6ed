"""Forecast a live cluster: run the simulator forward from a snapshot of now.

The live scheduler knows what runs (where, and for how long so far),
what waits, and for each job a duration estimate. `forecast` turns that
`ClusterView` into the simulator's inputs and runs the same engine and
the same `Policy.decide` forward from `view.now`, so predicted start and
end times come from the policy code that will make the real decisions.

Conventions:
- `durations[job_id]` is a job's total run time in seconds at its
  requested size (the live side picks it: the user's estimate, similar
  finished jobs, reported progress). A job missing from it has an
  unknown duration: it is simulated as running past the horizon, so its
  own end and every prediction that waits on it come out as None rather
  than as an invented number.
- Work already done counts: a running job resumes from
  `service_at(now)` seconds, a preempted pending job from its
  `service_seconds`. A job that ran past its estimate is assumed to be
  nearly done (1% of its estimate, at least a second, left).
- Pending jobs arrive in the simulation at `now` but keep their real
  submission and queue times in the views the policy reads, so the
  policy sees the same queue as the live pass. Pending jobs that no
  healthy node could ever hold are left out (no prediction).
- The run stops at `now + horizon`, or earlier when its wall-time
  budget runs out; what would happen later is unknown.

Pure: standard library, `core` and `sim` only (the import contract
forbids `server` here). The engine's run state is reached through a
small subclass, `_Forward`, because seeding running jobs is specific to
forecasting.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from schedulearn.core.decisions import Start
from schedulearn.core.fairshare_queues import Tenancy
from schedulearn.core.ledger import InvalidDecision
from schedulearn.core.policy import Policy
from schedulearn.core.views import ClusterView, GpuView, JobView, NodeView, Role, declared, rebuild
from schedulearn.sim.cluster import ClusterSpec
from schedulearn.sim.engine import Simulator
from schedulearn.sim.feasibility import why_unfit
from schedulearn.sim.jobs import SimJob, Workload
from schedulearn.sim.metrics import busy_gpu_seconds
from schedulearn.sim.results import Series
from schedulearn.sim.runstate import RunState
from schedulearn.sim.speed import LinearSpeed, SpeedModel

DEFAULT_HORIZON = 3 * 24 * 3600.0
# A job with no estimate runs this many horizons: it never ends in the run.
_FOREVER = 1000.0
_OVERDUE_LEFT = 0.01


@dataclass(frozen=True, slots=True)
class JobForecast:
    """Predicted start and end of one job (epoch seconds); None when unknown.

    A running job's `start` is when it actually started.
    """

    job_id: int
    start: float | None
    end: float | None


@dataclass(frozen=True, slots=True)
class ForecastSummary:
    """What the forecast predicts for the whole current queue.

    `mean_jct` is over the jobs with a predicted end, from their real
    submission; `makespan` runs from now to the last predicted end;
    `utilisation` is busy GPU-seconds over healthy GPU-seconds in that
    span. `unknown` counts jobs with no predicted end (no duration
    estimate, waiting behind one, or past the horizon).
    """

    jobs: int
    predicted: int
    unknown: int
    mean_jct: float | None
    makespan: float | None
    utilisation: float | None
    preemptions: int


@dataclass(frozen=True, slots=True)
class Forecast:
    now: float
    policy: str
    horizon: float
    jobs: dict[int, JobForecast]
    summary: ForecastSummary
    wall_seconds: float
    # For summaries over a subset of the jobs (`summary_over`).
    submitted: dict[int, float] = field(default_factory=dict)
    series: Series = field(default_factory=lambda: Series((), (), ()))
    total_gpus: int = 0
    preemptions: int = 0
    # True when the wall-time budget stopped the run before the horizon.
    cut_short: bool = False

    def of(self, job_id: int) -> JobForecast | None:
        return self.jobs.get(job_id)

    def summary_over(self, job_ids: Iterable[int]) -> ForecastSummary:
        """The summary counting only `job_ids` (e.g. the jobs every compared
        policy predicts, so that mean JCTs are over the same jobs)."""
        wanted = set(job_ids)
        ends = [
            (jid, f.end)
            for jid, f in self.jobs.items()
            if jid in wanted and f.end is not None and jid in self.submitted
        ]
        return _summary(ends, self.submitted, self.series, self.now, self.total_gpus,
                        len(wanted), self.preemptions)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _LiveJob(SimJob):
    """A job of the live queue: the simulator runs it, the policy sees its live view."""

    live: JobView | None = None

    def view(self, estimated_duration: float | None) -> JobView:
        # The live view, not a fresh one: the policy must see the same
        # submission time, queue time, estimate and service as live.
        # (Zero-argument super() does not work in a slots dataclass.)
        return self.live if self.live is not None else SimJob.view(self, estimated_duration)


class _HorizonReached(Exception):
    pass


class _Forward(Simulator):
    """The engine, seeded with the jobs already running, stopped at a horizon."""

    def __init__(
        self,
        workload: Workload,
        cluster: ClusterSpec,
        policy: Policy,
        speed: SpeedModel,
        until: float,
        deadline: float | None = None,
        tenancy: Tenancy | None = None,
    ) -> None:
        super().__init__(workload, cluster, policy, speed, record_segments=False, tenancy=tenancy)
        self.until = until
        self.deadline = deadline  # perf_counter() value: the wall-time budget ends
        self.cut_short = False

    def resume_from(self, job_id: int, done: float) -> None:
        run = self._runs[job_id]
        run.done = min(done, run.work * (1 - _OVERDUE_LEFT), max(0.0, run.work - 1.0))
        run.done = max(0.0, run.done)

    def seed_running(self, job: _LiveJob, live: JobView, done: float, now: float) -> bool:
        """Put a running job on its live placement with `done` seconds of work behind it."""
        placement = live.placement
        assert placement is not None
        try:
            self.ledger.apply([Start(job.id, placement)], {job.id: live})
        except InvalidDecision:
            # The database is the authority on what is held; hold the GPUs
            # even if a CPU or memory figure no longer adds up.
            relaxed = JobView(id=job.id, submitted_at=0.0, gpus=placement.num_gpus)
            try:
                self.ledger.apply([Start(job.id, placement)], {job.id: relaxed})
            except InvalidDecision:
                return False  # e.g. on a node that is down: it is being lost
        work = self.speed.work(job)
        run = RunState(job, work, work, work)
        self._runs[job.id] = run
        self.resume_from(job.id, done)
        run.first_start = live.started_at if live.started_at is not None else now
        self._start_segment(run, placement, now, first=True)
        if self._queues is not None:  # it never arrived: its queue is owed it from now on
            self._queues.asked(now, job, placement.num_gpus)
        self._running[job.id] = live
        self._running_changed = True
        return True

    def _pass(self, t: float) -> int:
        if t > self.until:
            raise _HorizonReached
        if self.deadline is not None and time.perf_counter() > self.deadline:
            # Out of wall time: what happened up to t stands, the rest is unknown.
            self.cut_short = True
            self.until = t
            raise _HorizonReached
        return super()._pass(t)

    def outcome(self, now: float, busy_at_start: int) -> tuple[dict[int, RunState], Series]:
        times, busy, queued = self._times, self._busy_series, self._queued_series
        if not times or times[0] > now:
            # The engine records the series from its first event; the seeded
            # jobs were busy from `now` on.
            times, busy = [now, *times], [busy_at_start, *busy]
            queued = [len(self.workload.jobs), *queued]
        return self._runs, Series(tuple(times), tuple(busy), tuple(queued))


def _idle(node: NodeView) -> NodeView:
    gpus = tuple(GpuView(g.index, g.type, g.uuid, g.memory_mb) for g in node.gpus)
    # Every other field (capabilities, and any declared later) by name.
    return rebuild(node, gpus=gpus, free_cpus=node.cpus, free_memory_gb=node.memory_gb)


_SUBMITTED = declared(JobView, Role.SUBMITTED)


def _sim_job(view: JobView, duration: float, arrives: float) -> _LiveJob:
    # Every submitted field by name (image and constraints included, so the
    # forecast applies the same feasibility rule as the live scheduler).
    submitted = {n: getattr(view, n) for n in _SUBMITTED}
    return _LiveJob(
        id=view.id,
        submitted_at=arrives,
        duration=duration,
        user=view.user,
        group=None,
        live=view,
        **submitted,
    )


def forecast(
    view: ClusterView,
    durations: Mapping[int, float],
    policy: Policy,
    speed: SpeedModel | None = None,
    horizon: float = DEFAULT_HORIZON,
    policy_name: str | None = None,
    budget_seconds: float | None = None,
) -> Forecast:
    """Simulate `view` forward under `policy`; see the module docstring.

    The view's tenant queues (`view.tenancy`) travel into the simulation,
    so a policy in the fair-share layer holds jobs back by their queues'
    shares there as it does live (usage starts from nothing: it orders
    lending only).

    `budget_seconds` bounds the wall time: a run that would take longer
    (a queue of thousands under a policy that re-sorts it on every event)
    stops where it got to, and later starts and ends are unknown
    (`Forecast.cut_short`).
    """
    started_wall = time.perf_counter()
    deadline = None if budget_seconds is None else started_wall + budget_seconds
    now = view.now
    until = now + horizon
    forever = _FOREVER * horizon
    speed = speed or LinearSpeed()
    cluster = ClusterSpec("live", tuple(_idle(n) for n in view.nodes))
    known = {j: d for j, d in durations.items() if d > 0}

    def duration_of(job: JobView) -> float:
        return known.get(job.id, forever)

    pending = [
        _sim_job(j, duration_of(j), now)
        for j in view.pending
        if why_unfit(_sim_job(j, 1.0, now), cluster) is None
    ]
    workload = Workload("live", tuple(pending))
    # All arrive at `now`; a Workload sorts ties by id, but the engine must
    # queue them in the live order (queue time, then id): `view.pending` is in
    # arrival order everywhere, and each policy's `order` ranks it from there,
    # so the forecast starts jobs in the order the Queue page shows.
    object.__setattr__(workload, "jobs", tuple(pending))
    sim = _Forward(workload, cluster, policy, speed, until, deadline, view.tenancy)
    for job in pending:
        assert job.live is not None
        if job.live.service_seconds > 0:
            sim.resume_from(job.id, job.live.service_seconds)
    busy_at_start = 0
    for live in view.running:
        if live.placement is None:
            continue
        job = _sim_job(live, duration_of(live), live.submitted_at)
        if sim.seed_running(job, live, live.service_at(now), now):
            busy_at_start += live.placement.num_gpus
    with contextlib.suppress(_HorizonReached):
        sim.run()
    runs, series = sim.outcome(now, busy_at_start)
    jobs: dict[int, JobForecast] = {}
    for jid, run in runs.items():
        has_estimate = jid in known
        end = run.end if has_estimate and run.end is not None and run.end <= sim.until else None
        start = run.first_start if run.first_start is not None else None
        jobs[jid] = JobForecast(jid, start, end)
    summary = _summarize(view, jobs, runs, series, now)
    return Forecast(
        now=now,
        policy=policy_name or policy.name,
        horizon=horizon,
        jobs=jobs,
        summary=summary,
        wall_seconds=time.perf_counter() - started_wall,
        submitted={j.id: j.submitted_at for j in (*view.pending, *view.running)},
        series=series,
        total_gpus=view.total_gpus,
        preemptions=summary.preemptions,
        cut_short=sim.cut_short,
    )


def _summarize(
    view: ClusterView,
    jobs: Mapping[int, JobForecast],
    runs: Mapping[int, RunState],
    series: Series,
    now: float,
) -> ForecastSummary:
    submitted = {j.id: j.submitted_at for j in (*view.pending, *view.running)}
    ends = [(jid, f.end) for jid, f in jobs.items() if f.end is not None and jid in submitted]
    preemptions = sum(r.preemptions for r in runs.values())
    return _summary(ends, submitted, series, now, view.total_gpus, len(submitted), preemptions)


def _summary(
    ends: Sequence[tuple[int, float]],
    submitted: Mapping[int, float],
    series: Series,
    now: float,
    gpus: int,
    total: int,
    preemptions: int,
) -> ForecastSummary:
    if not ends:
        return ForecastSummary(total, 0, total, None, None, None, preemptions)
    jcts = [end - submitted[jid] for jid, end in ends]
    last = max(end for _, end in ends)
    makespan = last - now
    util = None
    if makespan > 0 and gpus > 0:
        util = busy_gpu_seconds(series, now, last) / (gpus * makespan)
    return ForecastSummary(
        jobs=total,
        predicted=len(ends),
        unknown=total - len(ends),
        mean_jct=sum(jcts) / len(jcts),
        makespan=makespan,
        utilisation=util,
        preemptions=preemptions,
    )
