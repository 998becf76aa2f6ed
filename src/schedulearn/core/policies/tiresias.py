"""Tiresias: discretized two-dimensional least-attained-service (2D-LAS): jobs
sit in priority queues by attained GPU-seconds (GPUs x seconds run),
FIFO inside a queue; waiting jobs of a higher queue preempt preemptible
jobs of lower queues; a starvation guard promotes jobs that waited too
long. Source: Gu et al., "Tiresias: A GPU Cluster Manager for Distributed
Deep Learning", NSDI 2019 (discretized 2D-LAS, the "dlas-gpu" scheduler
of its simulator).

Rule in full, one pass (every `tick_seconds` = 60 s and on every event):
1. A job's queue is the number of thresholds its attained service
   (`JobView.attained_at(now)`, GPU-seconds) has reached: with the
   defaults, 2 queues split at 16 GPU-hours (57,600 GPU-seconds), the
   setting of the Pollux artifact's Tiresias. New jobs start in queue 0.
2. Pending jobs are taken by (queue, submission time). Each one that fits
   starts (one node when it fits, else a gang over the fewest nodes); one
   that does not fit suspends running preemptible jobs of strictly lower
   priority queues (lowest queue, then latest submitted, first), as few
   as it needs; failing that it is skipped, and later jobs may start.
   Jobs in the same queue never preempt each other, which avoids
   thrashing.
3. Starvation guard: a pending job that has run before and has waited
   (since it last entered the queue) longer than `starvation_factor`
   times its executed time is promoted to queue 0. A promoted job keeps
   queue 0 after it resumes until it has attained the first threshold
   again in that run; this is read from the snapshot (its wait before
   the run began, `started_at - queued_at`), so the policy keeps no
   state. `starvation_factor=0` disables the guard (as in the Pollux
   artifact). Default 10.

Options: `queues` (default 2) and `threshold` (GPU-seconds where queue 0
ends; several comma-separated values give every boundary, e.g.
`tiresias:queues=3:threshold=3600,57600`; with fewer values than
`queues - 1` each further boundary is 10x the previous one).

`mode=artifact` replaces the rules above with those of the Tiresias in
Pollux's evaluation artifact (two queues, no guard, preemption inside a
queue, GPUs counted not packed, most-free node first; see
`core.policies.tiresias_artifact`), for comparisons with its published
figures; run it with `simulate --round 60 --artifact-time` as that
artifact decides and computes time (docs/results.md §2).
"""

from __future__ import annotations

from bisect import bisect_right
from operator import attrgetter
from typing import ClassVar

from schedulearn.core.capabilities import asks_gpus_only
from schedulearn.core.decisions import Decision, Start
from schedulearn.core.placement import FreePool, stuck
from schedulearn.core.policies.tiresias_artifact import Demotions, artifact_pass
from schedulearn.core.policies.tiresias_waiting import WaitingQueues
from schedulearn.core.policy import QueueOrder
from schedulearn.core.preemption import Victims
from schedulearn.core.registry import register
from schedulearn.core.views import ClusterView, JobView

SIXTEEN_GPU_HOURS = 16 * 3600.0
MODES = ("default", "artifact")
# Arrival order inside a queue (ids are unique, so it never ties).
_ARRIVAL = attrgetter("submitted_at", "id")


@register
class Tiresias:
    name: ClassVar[str] = "tiresias"
    tick_seconds: ClassVar[float | None] = 60.0

    def __init__(
        self,
        queues: int = 2,
        threshold: float | str = SIXTEEN_GPU_HOURS,
        starvation_factor: float | None = None,
        mode: str = "default",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"tiresias: mode must be one of {', '.join(MODES)}, not {mode!r}")
        if mode == "artifact":
            if queues != 2:
                raise ValueError(
                    f"tiresias: mode=artifact has 2 queues, as Pollux's artifact; drop "
                    f"queues={queues!r}"
                )
            if starvation_factor:
                raise ValueError(
                    "tiresias: mode=artifact has no starvation guard; drop starvation_factor"
                )
        if starvation_factor is None:
            starvation_factor = 0.0 if mode == "artifact" else 10.0
        if not isinstance(queues, int) or queues < 1:
            raise ValueError(f"tiresias: queues must be a whole number, 1 or more, not {queues!r}")
        if starvation_factor < 0:
            raise ValueError(
                f"tiresias: starvation_factor must be 0 (off) or more, not {starvation_factor}"
            )
        self.queues = queues
        self.thresholds = _thresholds(threshold, queues)
        self.starvation_factor = float(starvation_factor)
        self.mode = mode
        # Queue 1's order in artifact mode (the only history that mode keeps).
        self._demotions = Demotions()
        # The waiting jobs' queues of the last pass, a cache (`tiresias_waiting`).
        self._waiting = (
            WaitingQueues(self.thresholds, self.starvation_factor)
            if self.thresholds and mode == "default"
            else None
        )

    # --- queues ------------------------------------------------------------

    def queue_of(self, job: JobView, now: float) -> int:
        """The job's priority queue now (0 is the highest)."""
        if not self.thresholds:
            return 0
        if job.placement is None:
            # `_starving`, inline: a pass asks this of every waiting job.
            factor = self.starvation_factor
            if factor > 0:
                service = job.service_seconds
                if service > 0 and now - job.waiting_since > factor * service:
                    return 0
            return bisect_right(self.thresholds, job.attained_gpu_seconds)
        if self._promoted_run(job, now):
            return 0
        return bisect_right(self.thresholds, job.attained_at(now))

    def _starving(self, job: JobView, now: float) -> bool:
        factor = self.starvation_factor
        return (
            factor > 0
            and job.service_seconds > 0
            and now - job.waiting_since > factor * job.service_seconds
        )

    def _promoted_run(self, job: JobView, now: float) -> bool:
        """Did this run begin with a promotion, and is it still under the first threshold?"""
        factor = self.starvation_factor
        started = job.started_at
        if factor <= 0 or started is None or job.queued_at is None or job.service_seconds <= 0:
            return False
        if started - job.queued_at <= factor * job.service_seconds:
            return False
        assert job.placement is not None
        return job.placement.num_gpus * (now - started) < self.thresholds[0]

    def steady_until(self, view: ClusterView) -> float:
        """Until when a pass over `view` decides the same if only time passes.

        Time changes this policy's choices only through the queues: a
        running job's attained service crosses a threshold (or its
        promoted run ends), or a waiting job starts to starve. Before the
        first of those, a pass that decided nothing would decide nothing
        again (a host or a wrapping layer may skip it; `core.fairshare`).
        """
        if self.mode == "artifact" or not self.thresholds:
            return view.now if self.mode == "artifact" else float("inf")
        if not view.pending:
            # Nobody waits: a pass starts and suspends nothing (`decide`), and
            # time alone brings nobody. Most ticks of a replay are such.
            return float("inf")
        # A simulator asks this after every pass that decided nothing, over
        # every waiting job: the loops below read each field once.
        now, first = view.now, float("inf")
        thresholds = self.thresholds
        factor = self.starvation_factor
        for job in view.running:
            started, placement = job.started_at, job.placement
            if started is None or placement is None or not placement.num_gpus:
                continue
            gpus = placement.num_gpus
            # Only a job that ran before can have had its run promoted.
            if factor > 0 and job.service_seconds > 0 and self._promoted_run(job, now):
                first = min(first, started + thresholds[0] / gpus)
                continue
            # The first threshold above the attained service (they ascend);
            # `JobView.attained_at`, written out.
            attained = job.attained_gpu_seconds
            above = bisect_right(thresholds, attained + gpus * max(0.0, now - started))
            if above < len(thresholds):
                reach = started + (thresholds[above] - attained) / gpus
                first = min(first, reach)
        waiting = self._waiting
        known = None if waiting is None else waiting.next_starving(view.pending, now)
        if known is not None:
            first = min(first, known)
        elif factor > 0:
            for job in view.pending:
                service = job.service_seconds
                if service > 0:
                    queued = job.queued_at  # `JobView.waiting_since`, written out
                    since = job.submitted_at if queued is None else queued
                    if not now - since > factor * service:  # not starving yet (`_starving`)
                        first = min(first, since + factor * service)
        return first

    # --- the pass ----------------------------------------------------------

    def _queues(self, view: ClusterView) -> list[list[JobView]]:
        """Pending jobs per queue (0 first), each in arrival order (submission
        time, then id): the pass takes them in this order.

        This is `queue_of` for every waiting job, written out (a replay asks
        it of every waiting job at every pass): a job under the first
        threshold is in queue 0 whether or not it starves, so only one that
        reached a threshold is tested for starvation.
        """
        now, thresholds, factor = view.now, self.thresholds, self.starvation_factor
        if self._waiting is not None:
            known = self._waiting.queues(view.pending, now)
            if known is not None:
                return known
        queues: list[list[JobView]] = [[] for _ in range(self.queues)]
        if not thresholds:
            queues[0].extend(view.pending)
        else:
            first = thresholds[0]
            top = queues[0]
            for job in view.pending:
                attained = job.attained_gpu_seconds
                if attained < first:
                    top.append(job)
                    continue
                if factor > 0:
                    service = job.service_seconds
                    if service > 0 and now - job.waiting_since > factor * service:
                        top.append(job)
                        continue
                queues[bisect_right(thresholds, attained)].append(job)
        for queue in queues:
            # Ids are unique, so this is a total order; a host that hands the
            # queue in arrival order (the simulator does) makes it one scan.
            queue.sort(key=_ARRIVAL)
        return queues

    def order(self, view: ClusterView) -> QueueOrder:
        return QueueOrder(
            tuple(job for queue in self._queues(view) for job in queue),
            "least attained GPU-service queue first, arrival order inside one",
        )

    def _victims(self, view: ClusterView, pool: FreePool) -> Victims:
        """Preemptible running jobs, lowest priority queue first, then the
        latest submitted (FIFO inside a queue).

        `queue_of` for every running job, written out: a job under the first
        threshold is in queue 0 (a promoted run is too), so only one that
        reached a threshold is asked whether its run was promoted.
        """
        now, thresholds, factor = view.now, self.thresholds, self.starvation_factor
        by_queue: list[list[JobView]] = [[] for _ in range(self.queues)]
        first = thresholds[0] if thresholds else float("inf")
        for job in view.running:
            placement = job.placement
            if placement is None or not job.preemptible:
                continue
            attained = job.attained_gpu_seconds
            started = job.started_at
            if started is not None:  # `JobView.attained_at`
                attained += placement.num_gpus * max(0.0, now - started)
            # Only a job that ran before can have had its run promoted.
            if attained < first or (
                factor > 0 and job.service_seconds > 0 and self._promoted_run(job, now)
            ):
                by_queue[0].append(job)
            else:
                by_queue[bisect_right(thresholds, attained)].append(job)
        ranked: list[JobView] = []
        levels: list[float] = []
        for queue in range(self.queues - 1, -1, -1):
            jobs = by_queue[queue]
            # Latest submitted first: (-submitted_at, -id) ascending; ids are unique.
            jobs.sort(key=_ARRIVAL, reverse=True)
            ranked.extend(jobs)
            levels.extend([float(queue)] * len(jobs))
        return Victims.ranked(view, pool, ranked, levels)

    def decide(self, view: ClusterView) -> list[Decision]:
        if self.mode == "artifact":
            return artifact_pass(view, self.thresholds[0], self._demotions)
        pending = view.pending
        if not pending:
            return []
        pool = FreePool(view)
        free = pool.total_free()
        if stuck(view, free):
            return []
        # `order` is these lists one after the other.
        queues = self._queues(view)
        last = self.queues - 1
        if free == 0 and not any(queues[:last]):
            return []  # nothing fits and nobody may preempt anyone
        decisions: list[Decision] = []
        victims: Victims | None = None  # built when someone must preempt
        # Per user, the fewest GPUs a GPU-only job could not make room for
        # since the pool last changed: a later one (same user, so the same
        # nodes; a queue no higher, so no more victims) needing as many fails
        # too, since such a job fits exactly when enough GPUs are free on its
        # nodes. On a backlogged cluster this skips most of the pass.
        failed: dict[str, int] = {}
        for queue, jobs in enumerate(queues):
            for job in jobs:
                placement = pool.pack(job) if job.gpus <= free else None
                if placement is not None:
                    pool.take(job, placement)
                    free -= placement.num_gpus
                    decisions.append(Start(job.id, placement))
                    failed.clear()
                    continue
                if queue == last:
                    if free == 0:
                        break  # the rest are in the last queue too
                    continue
                # A user's bar is checked before `asks_gpus_only`: a backlogged
                # pass meets thousands of jobs here, most of them skipped.
                bar = failed.get(job.user)
                if (
                    bar is not None
                    and job.gpus >= bar
                    # `asks_gpus_only(job)`, written out
                    and not (job.cpus or job.memory_gb or job.constraints or job.gpu_type)
                    and job.image is None
                ):
                    continue
                if victims is None:
                    victims = self._victims(view, pool)
                # Only jobs of strictly lower priority queues may be suspended.
                room = victims.room_for(job, free, above=queue)
                if room is None:
                    if asks_gpus_only(job):
                        failed[job.user] = job.gpus
                    continue
                decisions.extend(room.decisions)
                free = room.free
                failed.clear()
        return decisions


def _thresholds(threshold: float | str, queues: int) -> list[float]:
    """Queue boundaries in GPU-seconds, ascending, one fewer than the queues."""
    wanted = queues - 1
    if wanted == 0:
        return []
    if isinstance(threshold, str):
        try:
            given = [float(x) for x in threshold.split(",") if x.strip()]
        except ValueError:
            raise ValueError(
                f"tiresias: threshold must be GPU-seconds, e.g. 57600 or 3600,57600; "
                f"not {threshold!r}"
            ) from None
    else:
        given = [float(threshold)]
    if not given or any(t <= 0 for t in given) or given != sorted(given):
        raise ValueError(
            f"tiresias: thresholds must be positive and ascending GPU-seconds, not {threshold!r}"
        )
    if len(given) > wanted:
        raise ValueError(
            f"tiresias: {len(given)} thresholds given for {queues} queues; "
            f"give at most {wanted} (one fewer than the queues)"
        )
    while len(given) < wanted:
        given.append(given[-1] * 10.0)
    return given[:wanted]
