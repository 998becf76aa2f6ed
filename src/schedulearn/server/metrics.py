"""Prometheus metrics of one app (its own registry, so tests do not collide).

Counters are bumped by the API and the scheduler loop; gauges of jobs by
state and of GPUs are read from the database when `/metrics` is scraped.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from sqlalchemy import func, select
from sqlmodel import Session, col

from schedulearn.protocol import JobState
from schedulearn.server.models import Allocation, Gpu, Job, Node

PASS_BUCKETS = (
    0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
    0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2.5, 5, 10,
)  # fmt: skip


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.submitted = Counter("schedulearn_jobs_submitted", "Jobs accepted", registry=r)
        self.refused = Counter("schedulearn_jobs_refused", "Submissions refused", registry=r)
        self.started = Counter("schedulearn_jobs_assigned", "Jobs placed on GPUs", registry=r)
        self.preempted = Counter("schedulearn_jobs_preempted", "Preemptions ordered", registry=r)
        self.passes = Histogram(
            "schedulearn_scheduler_pass_seconds",
            "Duration of one scheduling pass",
            # Fine enough that a p50/p99 read from two scrapes means something
            # (bench/scale.py interpolates inside a bucket).
            buckets=PASS_BUCKETS,
            registry=r,
        )
        self.jobs = Gauge("schedulearn_jobs", "Jobs by state", ["state"], registry=r)
        self.gpus = Gauge("schedulearn_gpus", "GPUs of healthy nodes", registry=r)
        self.gpus_busy = Gauge("schedulearn_gpus_allocated", "GPUs held by jobs", registry=r)
        self.nodes = Gauge("schedulearn_nodes", "Nodes by health", ["health"], registry=r)

    def refresh(self, session: Session) -> None:
        counts = dict(
            session.execute(select(col(Job.state), func.count()).group_by(col(Job.state))).all()
        )
        for state in JobState:
            self.jobs.labels(state=state.value).set(counts.get(state.value, 0))
        healthy = set(
            session.execute(select(col(Node.name)).where(col(Node.healthy) == True)).scalars()  # noqa: E712
        )
        total = session.execute(select(func.count()).select_from(Node)).scalar_one()
        self.nodes.labels(health="up").set(len(healthy))
        self.nodes.labels(health="down").set(total - len(healthy))
        gpus = session.execute(select(col(Gpu.node))).scalars().all()
        self.gpus.set(sum(1 for n in gpus if n in healthy))
        self.gpus_busy.set(
            session.execute(select(func.count()).select_from(Allocation)).scalar_one()
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
