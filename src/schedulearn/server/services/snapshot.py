"""Read the cluster out of the database as `core` views.

Owns the mapping from rows to `NodeView`, `JobView` and `ClusterView`:
the scheduler builds its pass from these, and `show` explains why a job
waits from the same views. Reads use column tuples, not ORM objects,
because a pass may read thousands of pending jobs.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import select, text
from sqlmodel import Session

from schedulearn.core import ClusterView, GpuView, JobView, NodeView, Placement
from schedulearn.core.capabilities import NO_ACCOUNT
from schedulearn.protocol import JobState
from schedulearn.server.models import Allocation, Gpu, Job, Node
from schedulearn.server.services import capabilities, users

HOLDING = (JobState.ASSIGNED.value, JobState.RUNNING.value, JobState.PREEMPTING.value)

_JOB_COLUMNS = (
    Job.id,
    Job.submitted_at,
    Job.gpus,
    Job.name,
    Job.user,
    Job.min_gpus,
    Job.max_gpus,
    Job.cpus,
    Job.memory_gb,
    Job.gpu_type,
    Job.priority,
    Job.deadline,
    Job.estimated_duration,
    Job.model,
    Job.preemptible,
    Job.queued_at,
    Job.placement,
    Job.started_at,
    Job.service_seconds,
    Job.attained_gpu_seconds,
    Job.preemptions,
    Job.state,
    Job.image,
    Job.constraints,
)


def job_view_from_row(row: tuple) -> JobView:  # type: ignore[type-arg]
    (
        id_,
        submitted,
        gpus,
        name,
        user,
        min_g,
        max_g,
        cpus,
        mem,
        gtype,
        prio,
        deadline,
        est,
        model,
        preemptible,
        queued,
        placement,
        started,
        service,
        attained,
        preemptions,
        _state,
        image,
        constraints,
    ) = row
    return JobView(
        id=id_,
        submitted_at=submitted,
        gpus=gpus,
        name=name,
        user=user,
        min_gpus=min_g,
        max_gpus=max_g,
        cpus=cpus,
        memory_gb=mem,
        gpu_type=gtype or None,
        priority=prio,
        deadline=deadline,
        estimated_duration=est,
        model=model,
        preemptible=preemptible,
        queued_at=queued,
        placement=Placement.of(placement) if placement else None,
        started_at=started,
        service_seconds=service,
        attained_gpu_seconds=attained,
        preemptions=preemptions,
        image=image,
        constraints=tuple(constraints or ()),
    )


def job_view(job: Job) -> JobView:
    return job_view_from_row(tuple(getattr(job, c.key) for c in _JOB_COLUMNS))


class AccountBook:
    """Each job owner's unix account (`JobView.account`), looked up once per user.

    A node whose agent runs jobs as their owners takes only jobs whose
    account it has (`core.capabilities.can_run`); one book serves one pass.
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._known: dict[str, str] = {}

    def account(self, user: str) -> str:
        known = self._known.get(user)
        if known is None:
            run_as = users.unix_account_of(self._session, user)
            known = self._known[user] = NO_ACCOUNT if run_as is None else run_as.account
        return known

    def attach(self, view: JobView) -> JobView:
        account = self.account(view.user)
        return view if view.account == account else dataclasses.replace(view, account=account)


@dataclass(slots=True)
class Snapshot:
    """A `ClusterView` plus what the scheduler needs to check and write a pass."""

    view: ClusterView
    jobs: dict[int, JobView]
    # (node, gpu) -> (job id, attempt) for every held GPU, running or draining.
    holders: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # GPUs held by runs that are not in `view.running` (a job being
    # preempted, an old attempt or a cancelled job still shutting down):
    # (job id, attempt) -> node -> GPUs.
    draining: dict[tuple[int, int], dict[str, list[int]]] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    executors: dict[str, list[str]] = field(default_factory=dict)


def load_nodes(
    session: Session, running: list[JobView] | None = None
) -> tuple[tuple[NodeView, ...], dict[tuple[str, int], tuple[int, int]], dict[str, Node]]:
    """Every known node with its GPUs' holders and its unreserved CPUs and memory."""
    nodes = {n.name: n for n in session.execute(select(Node)).scalars()}
    gpus: dict[str, list[tuple[int, str, str, int]]] = defaultdict(list)
    # Column reads go straight to the connection: no ORM row processing.
    for node, index, uuid, gtype, mem in session.connection().execute(
        select(Gpu.node, Gpu.index, Gpu.uuid, Gpu.type, Gpu.memory_mb)
    ):
        gpus[node].append((index, uuid, gtype, mem))
    holders: dict[tuple[str, int], tuple[int, int]] = {
        (node, gpu): (job, attempt)
        for node, gpu, job, attempt in session.connection().execute(
            select(Allocation.node, Allocation.gpu_index, Allocation.job_id, Allocation.attempt)
        )
    }
    used_cpus: dict[str, float] = defaultdict(float)
    used_mem: dict[str, float] = defaultdict(float)
    for job in running or ():
        if job.placement is None:
            continue
        for name, held in job.placement:
            cpus, mem = job.demand_on(job.placement, len(held))
            used_cpus[name] += cpus
            used_mem[name] += mem
    views = []
    for name in sorted(nodes):
        node = nodes[name]
        gpu_views = tuple(
            GpuView(i, t, u, m, holders[(name, i)][0] if (name, i) in holders else None)
            for i, u, t, m in sorted(gpus[name])
        )
        views.append(
            NodeView(
                name=name,
                gpus=gpu_views,
                cpus=node.cpus,
                memory_gb=node.memory_gb,
                free_cpus=node.cpus - used_cpus[name],
                free_memory_gb=node.memory_gb - used_mem[name],
                healthy=node.healthy,
                capabilities=capabilities.from_row(node.capabilities),
            )
        )
    return tuple(views), holders, nodes


def pending_views(session: Session) -> list[JobView]:
    """The queue, in arrival order (a preempted job re-enters at the back)."""
    rows = session.connection().execute(
        select(*_JOB_COLUMNS)
        .where(Job.state == JobState.PENDING.value)
        .order_by(Job.queued_at, Job.id)
    )
    return [job_view_from_row(tuple(r)) for r in rows]


_QUEUE_ORDER = "SELECT id, queued_at FROM job WHERE state = 'pending' ORDER BY queued_at, id"


class PendingCache:
    """Views of pending jobs kept between passes (owned by the scheduler loop).

    A pending job's view changes only when it re-enters the queue, which
    gives it a new `queued_at`; so each pass reads just (id, queued_at)
    for the queue and builds views only for jobs it has not seen. With
    thousands of queued jobs this keeps a pass cheap.
    """

    def __init__(self) -> None:
        self._views: dict[int, tuple[float, JobView]] = {}

    def load(
        self, session: Session, attach: Callable[[JobView], JobView] | None = None
    ) -> list[JobView]:
        # The one query of a pass that grows with the queue: run it on the
        # driver's cursor (no parameters, so the SQL is the same for SQLite
        # and PostgreSQL), skipping SQLAlchemy's per-row processing.
        cursor = session.connection().connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(_QUEUE_ORDER)
            order = cursor.fetchall()
        finally:
            cursor.close()
        views = self._views
        missing = [i for i, q in order if (hit := views.get(i)) is None or hit[0] != q]
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            for r in session.connection().execute(select(*_JOB_COLUMNS).where(Job.id.in_(chunk))):  # type: ignore[union-attr]
                row = tuple(r)
                views[row[0]] = (row[15], job_view_from_row(row))
        if len(views) > 2 * len(order) + 1000:
            self._views = views = {i: views[i] for i, _ in order}
        if attach is not None:
            # Kept attached: a view is copied only when its owner's account changed.
            for i, _ in order:
                queued, view = views[i]
                if (new := attach(view)) is not view:
                    views[i] = (queued, new)
        return [views[i][1] for i, _ in order]


def build(session: Session, now: float, cache: PendingCache | None = None) -> Snapshot:
    running: list[JobView] = []
    attempts: dict[int, int] = {}
    book = AccountBook(session)
    for r in session.connection().execute(
        select(*_JOB_COLUMNS, Job.attempt).where(Job.state.in_(HOLDING))  # type: ignore[attr-defined]
    ):
        row = tuple(r)
        if row[21] == JobState.PREEMPTING.value:
            continue
        running.append(book.attach(job_view_from_row(row[:24])))
        attempts[row[0]] = row[24]
    pending = (
        cache.load(session, book.attach)
        if cache is not None
        else [book.attach(v) for v in pending_views(session)]
    )
    nodes, holders, rows = load_nodes(session, running)
    # GPUs held by anything but the current attempt of a running job: a job
    # being preempted, or an old attempt (or a cancelled job) still exiting.
    draining: dict[tuple[int, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for (node, gpu), (job_id, attempt) in holders.items():
        if attempts.get(job_id) != attempt:
            draining[(job_id, attempt)][node].append(gpu)
    jobs = {j.id: j for j in pending}
    jobs.update({j.id: j for j in running})
    return Snapshot(
        view=ClusterView(now=now, nodes=nodes, pending=tuple(pending), running=tuple(running)),
        jobs=jobs,
        holders=holders,
        draining={k: dict(v) for k, v in draining.items()},
        addresses={n: r.address for n, r in rows.items()},
        executors={n: list(r.executors) for n, r in rows.items()},
    )


class ShapeCache:
    """The nodes as `check_servable` needs them, kept between submissions.

    Nodes change rarely (an agent registers, a node goes down), and every
    submission is checked against them; `invalidate` is called on those
    changes. What it caches is only used to refuse impossible jobs, so a
    briefly stale copy can at worst accept a job that will wait.
    """

    def __init__(self) -> None:
        self._nodes: tuple[NodeView, ...] | None = None

    def invalidate(self) -> None:
        self._nodes = None

    def get(self, session: Session) -> tuple[NodeView, ...]:
        """Every known node, capabilities included (`NodeView.capabilities`)."""
        if self._nodes is None:
            self._nodes, _, _ = load_nodes(session)
        return self._nodes


# One statement, built once: is there anything a pass could do?
_COULD_CHANGE = text(
    """
    SELECT
      (SELECT count(*) FROM gpu JOIN node ON gpu.node = node.name WHERE node.healthy)
      - (SELECT count(*) FROM allocation JOIN node ON allocation.node = node.name
         WHERE node.healthy),
      EXISTS (SELECT 1 FROM job WHERE job.state IN ('assigned', 'running', 'preempting')
              AND job.preemptible),
      EXISTS (SELECT 1 FROM job WHERE job.state = 'pending'
              AND (job.gpus = 0 OR job.min_gpus = 0))
    """
)


def could_change(session: Session) -> bool:
    """False when no pass could start or preempt anything: no free GPU on a
    healthy node, no running job that may be preempted and no queued job
    that needs no GPU. Saves the full snapshot while the cluster is full."""
    free, preemptible, gpuless = session.connection().execute(_COULD_CHANGE).one()
    return bool(free > 0 or preemptible or gpuless)
