"""Metrics page data: GPU allocation and queue length over time, and JCTs.

Owns the reconstruction of the cluster's recent past from the job
history the server already keeps (`job.submitted_at` and the
`job_transition` rows written by the state machine), so the charts need
no extra bookkeeping and survive restarts. A job counts as queued while
pending and holds its GPUs while assigned, running or being preempted.

GPU utilisation here is the share of the healthy GPUs held by jobs
(the scheduler's measure, the same one the simulator reports); what the
GPUs' own meters say is on the Cluster page, from the latest heartbeats.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import and_, or_, select
from sqlmodel import Session, col

from schedulearn.protocol import JobState
from schedulearn.server.models import Gpu, Job, JobTransition, Node

WINDOWS: dict[str, float] = {"15m": 900, "1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400}
DEFAULT_WINDOW = "1h"
BUCKETS = 120
MAX_JOBS = 50_000  # a longer history is cut to the newest jobs

_HOLDING = {JobState.ASSIGNED.value, JobState.RUNNING.value, JobState.PREEMPTING.value}
_DONE = (JobState.SUCCEEDED.value, JobState.FAILED.value, JobState.TIMEOUT.value)


@dataclass(slots=True)
class MetricsPage:
    window: str
    start: float
    end: float
    total_gpus: int
    times: list[float] = field(default_factory=list)
    util_pct: list[float | None] = field(default_factory=list)
    gpus_held: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    jct: list[float] = field(default_factory=list)  # sorted, seconds
    waits: list[float] = field(default_factory=list)  # sorted, seconds
    finished: int = 0
    failed: int = 0
    cancelled: int = 0
    truncated: bool = False

    def quantile(self, values: list[float], q: float) -> float | None:
        if not values:
            return None
        return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]

    @property
    def mean_jct(self) -> float | None:
        return sum(self.jct) / len(self.jct) if self.jct else None

    @property
    def mean_wait(self) -> float | None:
        return sum(self.waits) / len(self.waits) if self.waits else None

    @property
    def has_activity(self) -> bool:
        return any(self.gpus_held) or any(self.queue) or bool(self.jct)


def _healthy_gpus(session: Session) -> int:
    healthy = set(
        session.execute(select(col(Node.name)).where(col(Node.healthy) == True)).scalars()  # noqa: E712
    )
    return sum(1 for node in session.execute(select(col(Gpu.node))).scalars() if node in healthy)


def _events(
    session: Session, start: float, end: float
) -> tuple[list[tuple[float, int, int]], bool]:
    """(time, queue change, GPU change) for every job alive during the window."""
    alive = and_(
        col(Job.submitted_at) <= end,
        or_(col(Job.ended_at) == None, col(Job.ended_at) >= start),  # noqa: E711
    )
    jobs = session.execute(
        select(col(Job.id), col(Job.gpus), col(Job.submitted_at))
        .where(alive)
        .order_by(col(Job.id).desc())
        .limit(MAX_JOBS + 1)
    ).all()
    truncated = len(jobs) > MAX_JOBS
    jobs = jobs[:MAX_JOBS]
    if not jobs:
        return [], truncated
    first_id = min(j[0] for j in jobs)
    steps: dict[int, list[tuple[float, str]]] = defaultdict(list)
    for job_id, at, to_state in session.execute(
        select(col(JobTransition.job_id), col(JobTransition.at), col(JobTransition.to_state))
        .join(Job, col(Job.id) == col(JobTransition.job_id))
        .where(alive, col(JobTransition.job_id) >= first_id, col(JobTransition.at) <= end)
        .order_by(col(JobTransition.id))
    ):
        steps[job_id].append((at, to_state))
    events: list[tuple[float, int, int]] = []
    for job_id, gpus, submitted in jobs:
        state, since = JobState.PENDING.value, submitted
        for at, to_state in [*steps.get(job_id, ()), (end, "")]:
            at = max(at, since)
            if state == JobState.PENDING.value:
                events += [(since, 1, 0), (at, -1, 0)]
            elif state in _HOLDING:
                events += [(since, 0, gpus), (at, 0, -gpus)]
            state, since = to_state, at
    events.sort()
    return events, truncated


def _sweep(
    events: list[tuple[float, int, int]], start: float, end: float, page: MetricsPage
) -> None:
    """Per bucket: mean GPUs held (time-weighted) and the most jobs queued."""
    width = (end - start) / BUCKETS
    queue = gpus = 0
    i = 0
    while i < len(events) and events[i][0] <= start:
        queue += events[i][1]
        gpus += events[i][2]
        i += 1
    for b in range(BUCKETS):
        lo, hi = start + b * width, start + (b + 1) * width
        area, last, peak = 0.0, lo, queue
        while i < len(events) and events[i][0] <= hi:
            at, dq, dg = events[i]
            area += gpus * (at - last)
            last = at
            queue += dq
            gpus += dg
            peak = max(peak, queue)
            i += 1
        area += gpus * (hi - last)
        held = area / width if width > 0 else float(gpus)
        page.times.append(hi)
        page.gpus_held.append(round(held, 3))
        page.queue.append(float(peak))
        page.util_pct.append(
            round(min(100.0, 100.0 * held / page.total_gpus), 2) if page.total_gpus else None
        )


def metrics_page(session: Session, now: float, window: str) -> MetricsPage:
    if window not in WINDOWS:
        window = DEFAULT_WINDOW
    start = now - WINDOWS[window]
    page = MetricsPage(window=window, start=start, end=now, total_gpus=_healthy_gpus(session))
    events, page.truncated = _events(session, start, now)
    _sweep(events, start, now, page)
    ended = session.execute(
        select(col(Job.state), col(Job.submitted_at), col(Job.started_at), col(Job.ended_at)).where(
            col(Job.ended_at) >= start,
            col(Job.ended_at) <= now,
        )
    ).all()
    for state, submitted, started, ended_at in ended:
        if state == JobState.CANCELLED.value:
            page.cancelled += 1
            continue
        if state not in _DONE:
            continue
        page.finished += 1
        page.failed += state in (JobState.FAILED.value, JobState.TIMEOUT.value)
        page.jct.append(max(0.0, ended_at - submitted))
        if started is not None:
            page.waits.append(max(0.0, started - submitted))
    page.jct.sort()
    page.waits.sort()
    return page
