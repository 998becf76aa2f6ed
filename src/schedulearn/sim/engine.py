"""The discrete-event engine: a virtual clock driving one policy over one workload.

Events are arrivals (read in submission order from the workload),
completions (a heap, invalidated lazily by a per-job version when a job
is preempted or resized) and policy ticks (for a policy with
`tick_seconds`, only while jobs wait or run). At each distinct event
time the engine applies the events, then calls `Policy.decide` once if
something changed or a tick is due, and applies the decisions through
`core.GpuLedger.apply`, which enforces the allocation rules; a decision
the ledger refuses is a policy bug and stops the run (`PolicyError`).
With `round_seconds` (`simulate --round`) the policy is instead called
only at multiples of the round while jobs wait or run, as Pollux's
simulator does every 60 s: events between rounds wait for the next one.

The engine owns all run state: the ledger, every job's progress, the
cached snapshot tuples handed to the policy, the start/stop segment log
and the series. Snapshots are incremental: job views are built when a
job arrives, starts, stops or resizes (a running view accrues service
through `started_at`), and only nodes the ledger marks dirty are rebuilt.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any

from schedulearn.collector import collector_held
from schedulearn.core import timelimits
from schedulearn.core.decisions import Decision, Preempt, Resize, Start
from schedulearn.core.fairshare_queues import Tenancy
from schedulearn.core.ledger import GpuLedger, InvalidDecision
from schedulearn.core.policy import Policy
from schedulearn.core.views import ClusterView, JobView, NodeView, Placement
from schedulearn.sim.cluster import ClusterSpec
from schedulearn.sim.feasibility import check_feasible
from schedulearn.sim.goodput_feed import GoodputFeed
from schedulearn.sim.job_learning import JobLearning
from schedulearn.sim.jobs import SimInputError, Workload
from schedulearn.sim.measured import MeasuredSpeed
from schedulearn.sim.metrics import summarize
from schedulearn.sim.queue_meters import QueueMeters
from schedulearn.sim.results import JobRecord, Segment, Series, SimResult
from schedulearn.sim.runstate import RunState, running_view, stopped_view
from schedulearn.sim.speed import ClusterShape, LinearSpeed, SpeedModel

ProgressFn = Callable[[int, int], None]


class PolicyError(RuntimeError):
    """A policy asked for something the ledger refused; the run stopped."""


class Simulator:
    """Replays one workload on one cluster under one policy."""

    def __init__(
        self,
        workload: Workload,
        cluster: ClusterSpec,
        policy: Policy,
        speed: SpeedModel | None = None,
        record_segments: bool = True,
        on_progress: ProgressFn | None = None,
        policy_name: str | None = None,
        round_seconds: float | None = None,
        tenancy: Tenancy | None = None,
    ) -> None:
        self.workload = workload
        self.cluster = cluster
        self.policy = policy
        self.policy_name = policy_name or policy.name
        self.speed: SpeedModel = speed or LinearSpeed()
        self.shape = ClusterShape.of(cluster.nodes)
        self.record_segments = record_segments
        self.on_progress = on_progress
        if round_seconds is not None and not round_seconds > 0:
            raise SimInputError(f"a scheduling round must be positive, not {round_seconds} s")
        # Decide only at multiples of this (Pollux's simulator: 60 s), not at events.
        self.round_seconds = round_seconds
        check_feasible(workload, cluster)
        # What jobs of measured applications learn of themselves (their batch
        # choice, steps, statistics), and the feed of it for a policy that asks.
        self._learning: JobLearning | None = None
        if isinstance(self.speed, MeasuredSpeed) and self.speed.apps:
            learned = workload.params.get("lengths") == "learned"
            self._learning = JobLearning(self.speed, learned)
        self._feed = GoodputFeed.wanted(self._learning, policy)
        self.ledger = GpuLedger(cluster.nodes)
        # Tenant queues: the view carries them, with the usage, served use and
        # owed GPU-time the meters keep from every event (`sim.queue_meters`).
        self._queues: QueueMeters | None = None
        self._tenancy: Tenancy | None = None
        if tenancy is not None:
            self._queues = QueueMeters(tenancy, cluster.total_gpus)
            self._tenancy = self._queues.tenancy
        # The last pass's snapshot, for `_skip_steady`.
        self._last_view: ClusterView | None = None
        self._runs: dict[int, RunState] = {}
        for job in workload.jobs:
            work = self.speed.work(job)
            estimate = self.speed.estimate(job, self.shape)
            isolated = estimate + self.speed.switch_cost(job, True)
            self._runs[job.id] = RunState(job, work, estimate, isolated)
        # Snapshot caches, rebuilt only when they change.
        self._node_list: list[NodeView] = list(cluster.nodes)
        self._node_index = {n.name: i for i, n in enumerate(cluster.nodes)}
        self._nodes: tuple[NodeView, ...] = tuple(cluster.nodes)
        # Free GPUs per node, kept with the node views and handed to policies
        # (ClusterView.free_counts) so that they need not count every node.
        self._count_list = [n.num_free_gpus for n in cluster.nodes]
        self._counts: tuple[int, ...] = tuple(self._count_list)
        self.ledger.take_dirty()
        self._pending: dict[int, JobView] = {}
        # The waiting jobs in arrival order (submission time, then id) and their
        # keys, for bisect: a preempted job rejoins at its place without a sort.
        self._queue: list[JobView] = []
        self._queue_keys: list[tuple[float, int]] = []
        self._running: dict[int, JobView] = {}
        self._pending_tuple: tuple[JobView, ...] = ()
        self._running_tuple: tuple[JobView, ...] = ()
        self._pending_changed = False
        self._running_changed = False
        self._heap: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._busy = 0
        self._segments: list[Segment] = []
        self._times: list[float] = []
        self._busy_series: list[int] = []
        self._queued_series: list[int] = []
        self.passes = 0
        self.events = 0
        self._finished = 0

    # --- the loop ----------------------------------------------------------

    def run(self) -> SimResult:
        # A replay allocates millions of small acyclic objects (`collector`).
        with collector_held():
            return self._run()

    def _run(self) -> SimResult:
        started_wall = time.perf_counter()
        jobs = self.workload.jobs
        n = len(jobs)
        heap = self._heap
        runs = self._runs
        tick = self.policy.tick_seconds
        next_tick: float | None = None
        rounds = self.round_seconds
        if rounds is not None:
            tick = None  # every round is a pass while jobs wait or run
        next_round: float | None = None
        # Ticks left out while the policy's choice cannot change
        # (`_skip_steady`): their grid starts at `grid`.
        grid, skipped = 0.0, False
        ai = 0
        report_every = max(1, n // 200)
        last_report = 0
        inf = float("inf")
        # The dicts are updated in place by the event handlers; bind them once.
        pending, running = self._pending, self._running
        times, busy_series, queued_series = self._times, self._busy_series, self._queued_series
        last_busy, last_queued = -1, -1
        events = 0
        while True:
            while heap:
                _, _, jid, version = heap[0]
                run = runs[jid]
                if run.version == version and run.end is None:
                    break
                heapq.heappop(heap)
            t = heap[0][0] if heap else inf
            if ai < n and jobs[ai].submitted_at < t:
                t = jobs[ai].submitted_at
            if next_tick is not None and next_tick < t:
                t = next_tick
            if next_round is not None and next_round < t:
                t = next_round
            if t == inf:
                break
            changed = False
            while ai < n and jobs[ai].submitted_at <= t:
                job = jobs[ai]
                view = pending[job.id] = job.view(self._estimate_of(runs[job.id]))
                if self._queues is not None:
                    self._queues.asked(t, job, job.gpus)
                # Arrivals come in arrival order (`Workload` sorts its jobs), after
                # every job already waiting.
                self._queue.append(view)
                self._queue_keys.append((view.submitted_at, view.id))
                self._pending_changed = changed = True
                ai += 1
            while heap and heap[0][0] <= t:
                _, _, jid, version = heapq.heappop(heap)
                run = runs[jid]
                if run.version == version and run.end is None:
                    self._complete(run, t)
                    changed = True
            if skipped and changed and tick is not None:
                # Something happened: the ticks skipped for an unchanged
                # view are due again, on the same grid.
                next_tick = grid + math.ceil((t - grid) / tick - 1e-9) * tick
                skipped = False
            if rounds is None:
                due = next_tick is not None and next_tick <= t
                acted = self._pass(t) if changed or due else 0
                boundary = True
            else:
                if next_round is None and (pending or running):
                    next_round = math.ceil(t / rounds) * rounds
                boundary = next_round is not None and next_round <= t
                acted = 0
                if boundary:
                    acted = self._pass(t)
                    next_round = t + rounds if pending or running else None
            events += 1
            if tick is not None:
                if pending or running:
                    if next_tick is None or next_tick <= t:
                        grid = t
                        next_tick = t + tick
                        if not acted and (changed or due):
                            next_tick = self._skip_steady(t, tick, next_tick)
                            skipped = next_tick > t + tick
                else:
                    next_tick = None
            # The series: busy GPUs and queue length after this event time.
            busy, queued = self._busy, len(pending)
            if busy != last_busy or queued != last_queued:
                last_busy, last_queued = busy, queued
                times.append(t)
                busy_series.append(busy)
                queued_series.append(queued)
            if self.on_progress is not None and self._finished - last_report >= report_every:
                last_report = self._finished
                self.on_progress(self._finished, n)
            if boundary and not acted and not running and not heap and ai >= n:
                # Nothing runs, nothing will arrive, and the policy starts nothing:
                # no later pass could see a different cluster. Stop here.
                break
        self.events = events
        if self.on_progress is not None:
            self.on_progress(self._finished, n)
        return self._result(time.perf_counter() - started_wall)

    # --- events ------------------------------------------------------------

    def _complete(self, run: RunState, t: float) -> None:
        jid = run.job.id
        # Ended by its time limit (`JobView.time_limit`, as the live server stops
        # it: core.timelimits) when its work is not all done.
        progress = self._progress_at(run, t)
        timed_out = run.job.time_limit is not None and progress < run.work * (1 - 1e-9)
        run.done = progress if timed_out else run.work
        run.end = t
        self._finished += 1
        if self._queues is not None and run.placement is not None:
            self._queues.asked(t, run.job, -run.placement.num_gpus)
        self._stop_segment(run, t, "timeout" if timed_out else "completed")
        if self._learning is not None and not timed_out:
            self._learning.ended(run)
        self.ledger.release(jid)
        del self._running[jid]
        self._running_changed = True

    def _stop_segment(self, run: RunState, t: float, reason: str) -> None:
        placement = run.placement
        assert placement is not None
        self._busy -= placement.num_gpus
        if self._queues is not None:
            self._queues.held(t, run.job, -placement.num_gpus)
        if self.record_segments:
            self._segments.append(Segment(run.job.id, run.started, t, placement, reason))
        run.served += max(0.0, t - run.started)
        if self._learning is not None:
            self._learning.stop(run)
        run.placement = None
        run.curve = None
        run.version += 1

    def _start_segment(self, run: RunState, placement: Placement, t: float, first: bool) -> None:
        job = run.job
        learnt = None if self._learning is None else self._learning.curve(run, placement)
        curve = learnt or self.speed.curve(job, placement, self.shape)
        run.curve = curve
        run.placement = placement
        run.started = t
        run.ready = t + self.speed.switch_cost(job, first)
        run.version += 1
        if run.first_start is None:
            run.first_start = t
        self._busy += placement.num_gpus
        if self._queues is not None:
            self._queues.held(t, job, placement.num_gpus)
        finish = run.ready + curve.seconds_to(run.done, run.work)
        left = timelimits.left_of(job.time_limit, run.served)
        if left is not None:
            # Stopped at its limit, counted over every segment, if the work lasts longer.
            finish = min(finish, t + left)
        self._seq += 1
        heapq.heappush(self._heap, (finish, self._seq, job.id, run.version))

    def _progress_at(self, run: RunState, t: float) -> float:
        assert run.curve is not None
        return min(run.work, run.curve.advance(run.done, max(0.0, t - run.ready)))

    # --- policy passes -----------------------------------------------------

    def _skip_steady(self, t: float, tick: float, next_tick: float) -> float:
        """The first tick at which the policy may decide something again.

        A pass at `t` decided nothing; a ticking policy that says until
        when its choice stays the same (`steady_until`, e.g. tiresias's
        next threshold) is not asked at the ticks before then (the same
        ticks, so the replay is unchanged; only passes that would decide
        nothing are left out).
        """
        steady = getattr(self.policy, "steady_until", None)
        if not callable(steady) or self._last_view is None:
            return next_tick
        until = float(steady(self._last_view))
        if until <= next_tick:
            return next_tick
        if until == math.inf:
            return until  # nothing but an event changes its choice: no tick is due
        return t + math.ceil((until - t) / tick - 1e-9) * tick

    def _pass(self, t: float) -> int:
        nodes = self._node_tuple()
        pending, running = self._pending_view(), self._running_view()
        goodput = None
        if self._feed is not None:
            ids = [*(v.id for v in self._queue), *self._running]
            goodput = self._feed.snapshot(t, self._runs, ids)
        if self._queues is not None:
            self._queues.at(t)
        view = ClusterView(t, nodes, pending, running, self._counts, goodput, self._tenancy)
        self._last_view = view
        self.passes += 1
        decisions = self.policy.decide(view)
        if not decisions:
            return 0
        views: dict[int, JobView] = {}
        for d in decisions:
            v = self._pending.get(d.job_id) or self._running.get(d.job_id)
            if v is not None:
                views[d.job_id] = v
        try:
            self.ledger.apply(decisions, views)
        except InvalidDecision as exc:
            raise PolicyError(
                f"policy {self.policy_name!r} made an invalid decision at t={t:g}s: {exc}"
            ) from None
        for d in decisions:
            self._enact(d, t)
        return len(decisions)

    def _enact(self, d: Decision, t: float) -> None:
        run = self._runs[d.job_id]
        jid = d.job_id
        if isinstance(d, Start):
            pending = self._pending.pop(jid)
            self._leave_queue(pending)
            self._pending_changed = True
            first = run.first_start is None
            if self._queues is not None:
                self._queues.asked(t, run.job, d.placement.num_gpus - run.job.gpus)
            self._start_segment(run, d.placement, t, first)
            self._running[jid] = running_view(pending, d.placement, t, self._fraction(run))
            self._running_changed = True
        elif isinstance(d, Preempt):
            old = self._running.pop(jid)
            if self._queues is not None:
                self._queues.asked(t, run.job, run.job.gpus - old.allocated_gpus)
            # A non-preemptible job (a reclaim requeues one that borrowed
            # GPUs) keeps no checkpoint: it restarts from the beginning.
            run.done = self._progress_at(run, t) if run.job.preemptible else 0.0
            self._stop_segment(run, t, "preempted")
            run.preemptions += 1
            back = self._pending[jid] = stopped_view(old, t, self._fraction(run), preempted=True)
            # It rejoins the queue at its place in arrival order.
            key = (back.submitted_at, back.id)
            at = bisect_right(self._queue_keys, key)
            self._queue_keys.insert(at, key)
            self._queue.insert(at, back)
            self._pending_changed = True
            self._running_changed = True
        elif isinstance(d, Resize):
            old = self._running[jid]
            old_placement = run.placement
            assert old_placement is not None
            run.done = self._progress_at(run, t)
            self._stop_segment(run, t, "resized")
            if self._queues is not None:
                self._queues.asked(t, run.job, d.placement.num_gpus - old_placement.num_gpus)
            if d.placement.num_gpus == old_placement.num_gpus:
                run.migrations += 1
            else:
                run.resizes += 1
            self._start_segment(run, d.placement, t, first=False)
            paused = stopped_view(old, t, self._fraction(run), preempted=False)
            self._running[jid] = running_view(paused, d.placement, t, self._fraction(run))
            self._running_changed = True

    # --- what a policy may know ------------------------------------------

    def _measured(self, run: RunState) -> bool:
        learning = self._learning
        return learning is not None and learning.speed.tables_of(run.job) is not None

    def _estimate_of(self, run: RunState) -> float | None:
        """A waiting job's expected duration as a policy sees it: for a job of a
        measured application, only when its spec declares its total (its length
        at its requested size is then the user's to declare, as live); the
        workload's own figure for the others."""
        if self._measured(run) and not run.job.declares_total:
            return None
        return run.estimate

    def _fraction(self, run: RunState) -> float | None:
        """The fraction done as a policy sees it: for a job of a measured
        application, only when its spec declares its total."""
        if self._measured(run) and not run.job.declares_total:
            return None
        return run.done / run.work

    # --- snapshot caches ---------------------------------------------------

    def _node_tuple(self) -> tuple[NodeView, ...]:
        dirty = self.ledger.take_dirty()
        if dirty:
            nodes = self._node_list
            counts = self._count_list
            index = self._node_index
            for name in dirty:
                node = self.ledger.node_view(name)
                i = index[name]
                nodes[i] = node
                counts[i] = len(node.free_gpu_indices)
            self._nodes = tuple(nodes)
            self._counts = tuple(counts)
        return self._nodes

    def _leave_queue(self, view: JobView) -> None:
        at = bisect_left(self._queue_keys, (view.submitted_at, view.id))
        if at >= len(self._queue) or self._queue[at] is not view:  # not reached: ids are unique
            at = self._queue.index(view)
        del self._queue_keys[at]
        del self._queue[at]

    def _pending_view(self) -> tuple[JobView, ...]:
        if self._pending_changed:
            self._pending_tuple = tuple(self._queue)
            self._pending_changed = False
        return self._pending_tuple

    def _running_view(self) -> tuple[JobView, ...]:
        if self._running_changed:
            self._running_tuple = tuple(self._running.values())
            self._running_changed = False
        return self._running_tuple

    # --- output ------------------------------------------------------------

    def _result(self, wall: float) -> SimResult:
        records = tuple(
            JobRecord(
                r.job.id,
                r.job.name,
                r.job.group,
                r.job.gpus,
                r.job.submitted_at,
                r.first_start,
                r.end,
                r.isolated,
                r.job.deadline,
                r.preemptions,
                r.migrations,
                r.resizes,
                r.job.queue,
            )
            for r in self._runs.values()
        )
        series = Series(tuple(self._times), tuple(self._busy_series), tuple(self._queued_series))
        return SimResult(
            policy=self.policy_name,
            workload=self.workload.name,
            cluster=self.cluster.name,
            total_gpus=self.cluster.total_gpus,
            summary=summarize(records, series, self.cluster.total_gpus),
            series=series,
            records=records,
            segments=tuple(self._segments),
            passes=self.passes,
            events=self.events,
            wall_seconds=wall,
        )


def simulate(
    workload: Workload,
    cluster: ClusterSpec,
    policy: Policy,
    speed: SpeedModel | None = None,
    **options: Any,
) -> SimResult:
    """Run one simulation and return its result."""
    return Simulator(workload, cluster, policy, speed, **options).run()
