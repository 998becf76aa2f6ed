"""Predicted start and end times, and `policy preview`: the live queue simulated forward.

Owns `Predictor`, the app's cache of forecasts. A forecast reads the
cluster (`snapshot.build`), the duration estimates (`durations`) and the
policy in force, and runs `schedulearn.sim.forecast` — the simulator's
engine over the same policy code as the live scheduler — forward from
now. It is recomputed only when the state it rests on changed: a new
job, a state change (start, end, preemption, cancel), a node change or
a policy switch (a fingerprint read in one cheap query), or after
`ttl` seconds (run times and reported progress drift); never once per
request. The simulation runs off the database thread, so a slow one
does not hold up the API; it has a wall-time budget (`BUDGET_SECONDS`,
later times are then unknown), and a slow forecast is redone at most
once per 20 times its cost however fast the state changes (job listings
may then show predictions a few seconds old; `policy preview` always
reads the queue as it is).

Jobs being preempted are forecast as queued again (their GPUs are about
to be freed, and they come back to the queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass

from sqlalchemy import select, text
from sqlmodel import Session, col

from schedulearn.clock import Clock
from schedulearn.core import ClusterView, JobView, Policy, dependencies
from schedulearn.core.fairshare import FairShare
from schedulearn.core.throughput import ProfileTable
from schedulearn.protocol import JobPublic, JobState, PolicyForecast, PolicyPreview
from schedulearn.server.db import Database
from schedulearn.server.errors import BadRequest
from schedulearn.server.models import Job
from schedulearn.server.services import live_views, profiles, queues, snapshot
from schedulearn.server.services import policy as policy_service
from schedulearn.server.services.durations import DurationEstimate, JobFacts, estimate_all
from schedulearn.sim.forecast import DEFAULT_HORIZON, Forecast, ForecastSummary, forecast

log = logging.getLogger(__name__)

# Wall time one simulation may take; past it, later times are unknown.
BUDGET_SECONDS = 2.0
# A forecast that cost more than this is redone at most once per 20 times its
# cost, even as the state changes, so that forecasting stays a small share of
# the server's time under a stream of changes (a draining queue of thousands).
SLOW_SECONDS = 0.05
# A forecast that cost more than this is redone in the background when it is
# due: the listing that finds it due gets the last one at once (issue 36: with
# 10,000 jobs queued a forecast takes up to its budget, and the listings that
# waited for it had a p99 of 4-25 s). Cheaper ones are redone in the request,
# so a small cluster's listing shows the state it follows.
BACKGROUND_SECONDS = 0.25

ACTIVE = {JobState.PENDING, JobState.ASSIGNED, JobState.RUNNING, JobState.PREEMPTING}

_FINGERPRINT = text(
    """
    SELECT (SELECT max(id) FROM job), (SELECT max(id) FROM job_transition),
           (SELECT count(*) FROM node WHERE healthy), (SELECT count(*) FROM gpu)
    """
)
# Optional column added by the progress work (issue 5): read it when it exists.
_PROGRESS = getattr(Job, "progress", None)


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a forecast rests on, read in one database call."""

    view: ClusterView
    durations: dict[int, DurationEstimate]
    spec: str
    fingerprint: tuple[object, ...]
    # The live throughput profiles, for policies that take them (similarity).
    profiles: ProfileTable | None = None
    min_resize_age: float | None = None
    # With tenant queues: the fair-share layer's minimum run time (the scheduler's).
    queue_min_run: float = 300.0


def fingerprint(session: Session, default_policy: str) -> tuple[object, ...]:
    row = tuple(session.connection().execute(_FINGERPRINT).one())
    return (
        *row,
        profiles.mark(session),
        queues.mark(session),
        policy_service.current_spec(session, default_policy),
    )


def _facts(session: Session, views: list[JobView], now: float) -> list[JobFacts]:
    ids = [v.id for v in views]
    extra: dict[int, tuple[object, object]] = {}
    columns = [Job.id, Job.command] + ([_PROGRESS] if _PROGRESS is not None else [])
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for row in session.execute(select(*columns).where(col(Job.id).in_(chunk))):
            extra[row[0]] = (row[1], row[2] if len(row) > 2 else None)
    return [
        JobFacts(
            id=v.id,
            user=v.user,
            name=v.name,
            command=extra.get(v.id, (None, None))[0],
            estimated_duration=v.estimated_duration,
            service_seconds=v.service_at(now),
            progress=extra.get(v.id, (None, None))[1],
            time_limit=v.time_limit,
        )
        for v in views
    ]


def _preempting(session: Session, now: float) -> list[JobView]:
    """Jobs being preempted, as the queued jobs they are about to be again."""
    rows = session.connection().execute(
        select(*snapshot.JOBS.columns).where(col(Job.state) == JobState.PREEMPTING)
    )
    views = []
    for r in rows:
        v = snapshot.JOBS.from_row(r)
        views.append(
            dataclasses.replace(
                v,
                placement=None,
                started_at=None,
                queued_at=now,
                service_seconds=v.service_at(now),
                attained_gpu_seconds=v.attained_at(now),
            )
        )
    return views


def read_inputs(
    session: Session,
    now: float,
    default_policy: str,
    min_resize_age: float | None = None,
    queue_min_run: float = 300.0,
    kept: live_views.Kept | None = None,
) -> Inputs:
    """What a forecast rests on; `kept`: views kept from the last read (the
    predictor's own, as the scheduler keeps its own)."""
    mark = fingerprint(session, default_policy)
    snap = snapshot.build(session, now, kept)
    # A job waiting on a dependency starts when another job ends as it asks,
    # which no forecast of the queue can say: it gets no predicted times.
    outcomes = snap.view.outcomes or {}
    ready = [
        j
        for j in snap.view.pending
        if not j.dependency or dependencies.verdict(j.dependency, outcomes).met
    ]
    pending = [*ready, *_preempting(session, now)]
    view = dataclasses.replace(snap.view, pending=tuple(pending))
    jobs = [*view.pending, *view.running]
    durations = estimate_all(session, _facts(session, jobs, now))
    spec = str(mark[-1])
    # Only a policy with a `profiles` option reads the table (17 ms to build).
    table = profiles.live_table(session) if profiles.takes_profiles(spec) else None
    return Inputs(view, durations, spec, mark, table, min_resize_age, queue_min_run)


def run(inputs: Inputs, spec: str, policy: Policy | None = None) -> Forecast:
    """Simulate `inputs` under `spec` (a fresh policy object: policies keep state)."""
    try:
        built = policy or policy_service.build(
            spec, inputs.min_resize_age, **profiles.policy_overrides(spec, inputs.profiles)
        )
    except BadRequest:
        # An invalid stored spec: the scheduler runs fifo then, and so does this.
        built = policy_service.build("fifo")
    if inputs.view.tenancy is not None and not isinstance(built, FairShare):
        # Queues are declared: the scheduler runs the policy in the fair-share
        # layer, so the forecast must too, or a job its queue holds back would
        # be predicted to start at once.
        built = FairShare(built, min_run=inputs.queue_min_run)
    seconds = {job_id: d.seconds for job_id, d in inputs.durations.items()}
    return forecast(
        inputs.view,
        seconds,
        built,
        horizon=DEFAULT_HORIZON,
        policy_name=spec,
        budget_seconds=BUDGET_SECONDS,
    )


def _nothing(inputs: Inputs) -> Forecast:
    """A forecast that predicts nothing (what a failed simulation leaves)."""
    count = len(inputs.view.pending) + len(inputs.view.running)
    summary = ForecastSummary(count, 0, count, None, None, None, 0)
    return Forecast(inputs.view.now, inputs.spec, DEFAULT_HORIZON, {}, summary, 0.0)


def seen_preemptions(inputs: Inputs) -> dict[int, int]:
    """Each job the forecast simulated, with the preemptions it had then."""
    view = inputs.view
    return {j.id: j.preemptions for j in (*view.pending, *view.running)}


def annotate(
    job: JobPublic, inputs: Inputs, result: Forecast, seen: dict[int, int] | None = None
) -> JobPublic:
    """`job` with its duration estimate and predicted times (active jobs only).

    `seen`: `seen_preemptions(inputs)`. A forecast made before the job was
    last preempted or requeued (a cached one, served while the state moves
    on) predicted a run that was since cut short: it gives no times for it,
    rather than a start that has already passed.
    """
    if job.state not in ACTIVE:
        return job
    estimate = inputs.durations.get(job.id)
    predicted = result.of(job.id)
    if seen is not None and seen.get(job.id, job.preemptions) != job.preemptions:
        predicted = None
    update: dict[str, object] = {}
    if estimate is not None:
        update["duration_estimate"] = round(estimate.seconds, 3)
        update["duration_source"] = estimate.source.value
    if predicted is not None:
        if job.state is JobState.PENDING or job.state is JobState.PREEMPTING:
            update["predicted_start_at"] = predicted.start
        update["predicted_end_at"] = predicted.end
    return job.model_copy(update=update) if update else job


def preview(inputs: Inputs, specs: list[str]) -> PolicyPreview:
    """Each policy's forecast of the current queue, figures over the same jobs.

    A job some policy cannot predict (it waits behind a job of unknown
    duration there) is left out of every row's mean JCT and makespan, so
    that a policy is not made to look better by the jobs it leaves stuck;
    each row still says how many jobs it predicts.
    """
    results: dict[str, Forecast | Exception] = {}
    for spec in specs:
        try:
            results[spec] = run(inputs, spec)
        except Exception as exc:
            # One policy failing (a bug, or a third-party policy) must not
            # hide the others' figures.
            log.exception("policy preview of %s failed", spec)
            results[spec] = exc
    ran = [r for r in results.values() if isinstance(r, Forecast)]
    everyone = {j.id for j in (*inputs.view.pending, *inputs.view.running)}
    common = set(everyone)
    for r in ran:
        common &= {jid for jid, f in r.jobs.items() if f.end is not None}
    rows = []
    for spec, result in results.items():
        if isinstance(result, Exception):
            rows.append(
                PolicyForecast(
                    spec=spec,
                    in_force=spec == inputs.spec,
                    mean_jct=None,
                    makespan=None,
                    utilisation=None,
                    predicted=0,
                    unknown=len(everyone),
                    preemptions=0,
                    wall_seconds=0.0,
                    error=f"the simulation failed: {result}",
                )
            )
            continue
        own = result.summary
        over = result.summary_over(common)
        rows.append(
            PolicyForecast(
                spec=spec,
                in_force=spec == inputs.spec,
                mean_jct=over.mean_jct,
                makespan=over.makespan,
                utilisation=over.utilisation,
                predicted=own.predicted,
                unknown=own.unknown,
                preemptions=own.preemptions,
                wall_seconds=result.wall_seconds,
            )
        )
    return PolicyPreview(
        at=inputs.view.now,
        in_force=inputs.spec,
        pending=len(inputs.view.pending),
        running=len(inputs.view.running),
        without_estimate=sum(1 for j in everyone if j not in inputs.durations),
        compared=len(common),
        horizon_seconds=DEFAULT_HORIZON,
        policies=rows,
    )


def preview_specs(requested: str | None, in_force: str) -> list[str]:
    """The policies to preview: those named (validated), or every registered one.

    The policy in force keeps its options (e.g. `fifo:backfill=true`) in the
    default list, in place of its bare name.
    """
    if requested:
        specs = [s.strip() for s in requested.split(",") if s.strip()]
        for spec in specs:
            policy_service.build(spec)  # BadRequest naming the valid policies
        return list(dict.fromkeys(specs))
    name = policy_service.build(in_force).name
    return [in_force if n == name else n for n in policy_service.public(in_force).available]


class Predictor:
    """The app's forecast under the policy in force, recomputed when the state changes."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        default_policy: str,
        ttl_seconds: float = 10.0,
        min_resize_age: float | None = None,
        slow_seconds: float = SLOW_SECONDS,
        queue_min_run: float = 300.0,
        background_seconds: float = BACKGROUND_SECONDS,
    ) -> None:
        self.db = db
        self.clock = clock
        self.default_policy = default_policy
        self.min_resize_age = min_resize_age
        self.queue_min_run = queue_min_run
        self.ttl_seconds = ttl_seconds
        self.slow_seconds = slow_seconds
        self.background_seconds = background_seconds
        # The queue, running jobs and nodes as views, kept from one forecast to
        # the next (read under `_lock`, one forecast at a time).
        self._kept = live_views.Kept()
        self._remaking: asyncio.Task[None] | None = None  # a forecast redone in the background
        self._lock = asyncio.Lock()
        self._cached: tuple[Inputs, Forecast, float] | None = None
        self._cost = 0.0  # seconds the last forecast took, reading included
        self._previews: dict[tuple[object, ...], tuple[PolicyPreview, float]] = {}
        self.computed = 0  # how many forecasts were run (for tests and metrics)

    def _fresh(self, mark: tuple[object, ...], strict: bool) -> tuple[Inputs, Forecast] | None:
        """The cached forecast if it may still be served: not older than the ttl, and
        the state unchanged, unless it was slow (not `strict`: then it is redone at
        most once per 20 times its cost)."""
        cached = self._cached
        if cached is None:
            return None
        inputs, result, made = cached
        age = self.clock.now() - made
        if age > max(self.ttl_seconds, 20 * self._cost):
            return None
        slow = self._cost > self.slow_seconds and age <= 20 * self._cost
        if inputs.fingerprint != mark and (strict or not slow):
            return None
        return inputs, result

    async def current(self, strict: bool = False) -> tuple[Inputs, Forecast]:
        """The forecast of the current state (`strict`: never a slow one's stale copy)."""
        mark = await self.db.run(fingerprint, self.default_policy)
        hit = self._fresh(mark, strict)
        if hit is not None:
            return hit
        cached = self._cached
        if not strict and cached is not None and self._cost > self.background_seconds:
            if self._remaking is None or self._remaking.done():
                self._remaking = asyncio.create_task(self._remake_quietly(mark))
            return cached[0], cached[1]
        return await self._remake(mark, strict)

    async def _remake_quietly(self, mark: tuple[object, ...]) -> None:
        try:
            await self._remake(mark, strict=False)
        except Exception:
            # Nobody awaits this one: a failure (the database away) is logged, and
            # the listings go on with the last forecast until the next try.
            log.exception("forecast in the background failed; the last one is served")

    async def stop(self) -> None:
        """Wait for a forecast being redone in the background (at shutdown)."""
        if self._remaking is not None:
            self._remaking.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._remaking

    async def _remake(self, mark: tuple[object, ...], strict: bool) -> tuple[Inputs, Forecast]:
        async with self._lock:
            hit = self._fresh(mark, strict)
            if hit is not None:
                return hit
            began = time.perf_counter()
            inputs = await self.db.run(
                read_inputs,
                self.clock.now(),
                self.default_policy,
                self.min_resize_age,
                self.queue_min_run,
                self._kept,
            )
            try:
                result = await asyncio.to_thread(run, inputs, inputs.spec)
            except Exception:
                # Predictions are an extra: a failing forecast must not break
                # the job listing; it shows no predictions until the next try.
                log.exception("forecast under %s failed; no predictions", inputs.spec)
                result = _nothing(inputs)
            self.computed += 1
            self._cost = time.perf_counter() - began
            self._cached = (inputs, result, self.clock.now())
            return inputs, result

    async def annotate(self, jobs: list[JobPublic]) -> list[JobPublic]:
        """The jobs with their predictions (one forecast serves them all)."""
        if not any(j.state in ACTIVE for j in jobs):
            return jobs
        inputs, result = await self.current()
        seen = seen_preemptions(inputs)
        return [annotate(j, inputs, result, seen) for j in jobs]

    async def preview(self, requested: str | None) -> PolicyPreview:
        # An admin asks for a preview now and then, about the queue as it is now.
        inputs, _ = await self.current(strict=True)
        specs = preview_specs(requested, inputs.spec)
        if inputs.profiles is None and any(profiles.takes_profiles(s) for s in specs):
            table = await self.db.run(profiles.live_table)
            inputs = dataclasses.replace(inputs, profiles=table)
        key = (*inputs.fingerprint, *specs)
        hit = self._previews.get(key)
        if hit is not None and self.clock.now() - hit[1] <= self.ttl_seconds:
            return hit[0]
        result = await asyncio.to_thread(preview, inputs, specs)
        # One entry per queue state and list of policies; old states are dropped.
        n = len(inputs.fingerprint)
        self._previews = {k: v for k, v in self._previews.items() if k[:n] == key[:n]}
        self._previews[key] = (result, self.clock.now())
        return result
