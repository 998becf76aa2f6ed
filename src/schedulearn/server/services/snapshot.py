"""Read the cluster out of the database as `core` views.

Owns the mapping from rows to `NodeView`, `JobView` and `ClusterView`:
the scheduler builds its pass from these, and `show` explains why a job
waits from the same views. Reads use column tuples, not ORM objects,
because a pass may read thousands of pending jobs; the columns are the
declared fields' (`server.declared.ViewReader`), selected and mapped by
name, so a field added to `JobView` or `NodeView` needs no edit here.
States in the queries are bound parameters from `JobState`.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from sqlalchemy import Dialect, Select, bindparam, exists, func, literal_column, or_, select
from sqlmodel import Session, col

from schedulearn.core import ClusterView, GpuView, JobView, NodeView, Placement
from schedulearn.core import dependencies as dependency_rule
from schedulearn.core.capabilities import NO_ACCOUNT
from schedulearn.core.views import rebuild
from schedulearn.protocol import JobState
from schedulearn.server.declared import ViewReader
from schedulearn.server.models import Allocation, Gpu, Job, Node
from schedulearn.server.services import dependencies, queues, users
from schedulearn.server.services import goodput as goodput_reports

if TYPE_CHECKING:
    from schedulearn.server.services.live_views import Kept

HOLDING = (JobState.ASSIGNED, JobState.RUNNING, JobState.PREEMPTING)


def _placement(stored: dict[str, list[int]] | None) -> Placement | None:
    return Placement.of(stored) if stored else None


# Every stored `JobView` field, selected and mapped by name (`declared`).
JOBS: ViewReader[JobView] = ViewReader(
    JobView,
    Job.__table__,
    {"placement": _placement},
)
NODES: ViewReader[NodeView] = ViewReader(NodeView, Node.__table__)


def job_view(job: Job) -> JobView:
    return JOBS.from_object(job)


class AccountBook:
    """Each job owner's unix account (`JobView.account`, a VIEW field: computed
    here from the user records, never stored), read in one query per pass.

    A node whose agent runs jobs as their owners takes only jobs whose
    account it has (`core.capabilities.can_run`); an owner without an
    enabled record gets `NO_ACCOUNT`, which no such node takes. One book
    serves one pass.
    """

    def __init__(self, session: Session) -> None:
        self.accounts = {name: r.account for name, r in users.unix_accounts(session).items()}

    def account(self, user: str) -> str:
        return self.accounts.get(user, NO_ACCOUNT)

    def attach(self, view: JobView) -> JobView:
        account = self.account(view.user)
        return view if view.account == account else dataclasses.replace(view, account=account)


@dataclass(slots=True)
class Held:
    """A job holding GPUs: its view (`account` and `stopping` as last attached)
    and what the pass needs beside it."""

    view: JobView
    state: JobState
    attempt: int
    resume_kind: str | None


@dataclass(slots=True)
class Snapshot:
    """A `ClusterView` plus what the scheduler needs to check and write a pass."""

    view: ClusterView
    jobs: dict[int, JobView]
    # (node, gpu) -> (job id, attempt) for every held GPU, running or draining.
    holders: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # GPUs held by runs that are not in `view.running` (an old attempt, a
    # moving job's next one, a cancelled job still shutting down; not a job
    # being preempted, whose GPUs `build` shows free): (job id, attempt) ->
    # node -> GPUs.
    draining: dict[tuple[int, int], dict[str, list[int]]] = field(default_factory=dict)


# The statements every pass runs, built once: building a statement and its
# cache key costs more than SQLite takes to run it.
_NODES = select(Node)
_GPUS = select(col(Gpu.node), col(Gpu.index), col(Gpu.uuid), col(Gpu.type), col(Gpu.memory_mb))
_HOLDERS = select(
    col(Allocation.node), col(Allocation.gpu_index), col(Allocation.job_id), col(Allocation.attempt)
)
_VIEWS_OF = select(*JOBS.columns).where(col(Job.id).in_(bindparam("ids", expanding=True)))
_HOLDING_VIEWS = select(
    *JOBS.columns, col(Job.state), col(Job.attempt), col(Job.resume_kind)
).where(col(Job.state).in_(HOLDING))


def load_nodes(
    session: Session,
    running: list[JobView] | None = None,
    exiting: set[tuple[int, int]] | frozenset[tuple[int, int]] = frozenset(),
) -> tuple[tuple[NodeView, ...], dict[tuple[str, int], tuple[int, int]], dict[str, Node]]:
    """Every known node with its GPUs' holders and its unreserved CPUs and
    memory. GPUs held by an `exiting` run (job id, attempt) are shown free in
    the views (and still returned among the holders)."""
    nodes = {n.name: n for n in session.execute(_NODES).scalars()}
    gpus: dict[str, list[tuple[int, str, str, int]]] = defaultdict(list)
    # Column reads go straight to the connection: no ORM row processing.
    for node, index, uuid, gtype, memory_mb in session.connection().execute(_GPUS):
        gpus[node].append((index, uuid, gtype, memory_mb))
    holders: dict[tuple[str, int], tuple[int, int]] = {
        (node, gpu): (job, attempt)
        for node, gpu, job, attempt in session.connection().execute(_HOLDERS)
    }
    used_cpus: dict[str, float] = defaultdict(float)
    used_mem: dict[str, float] = defaultdict(float)
    for job in running or ():
        if job.placement is None:
            continue
        for name, held in job.placement:
            cpus, mem = job.demand_on(
                job.placement, len(held), nodes[name].cpus if name in nodes else 0.0
            )
            used_cpus[name] += cpus
            used_mem[name] += mem
    shown = {gpu: run[0] for gpu, run in holders.items() if run not in exiting}
    views = []
    for name in sorted(nodes):
        node = nodes[name]
        gpu_views = tuple(
            GpuView(i, t, u, m, shown.get((name, i))) for i, u, t, m in sorted(gpus[name])
        )
        views.append(
            NODES.from_object(
                node,
                gpus=gpu_views,
                free_cpus=node.cpus - used_cpus[name],
                free_memory_gb=node.memory_gb - used_mem[name],
            )
        )
    return tuple(views), holders, nodes


def pending_views(session: Session) -> list[JobView]:
    """The queue, in arrival order (a preempted job re-enters at the back)."""
    rows = session.connection().execute(
        select(*JOBS.columns)
        .where(col(Job.state) == JobState.PENDING)
        .order_by(col(Job.queued_at), col(Job.id))
    )
    return [JOBS.from_row(r) for r in rows]


_QUEUE_ORDER = (
    select(col(Job.id), col(Job.queued_at))
    .where(col(Job.state) == JobState.PENDING)
    .order_by(col(Job.queued_at), col(Job.id))
)


def driver_statement(stmt: Select[*tuple[Any, ...]], dialect: Dialect) -> tuple[str, Any]:
    """`stmt` as the SQL text and parameters the DB-API driver takes."""
    compiled = stmt.compile(dialect=dialect)
    params = {
        k: v.value if isinstance(v, Enum) else v for k, v in compiled.construct_params().items()
    }
    if compiled.positional:
        return compiled.string, tuple(params[k] for k in compiled.positiontup or ())
    return compiled.string, params


class PendingCache:
    """Views of pending jobs kept between passes (owned by the scheduler loop).

    A pending job's view changes only when it re-enters the queue, which
    gives it a new `queued_at`; so each pass reads just (id, queued_at)
    for the queue and builds views only for jobs it has not seen. With
    thousands of queued jobs this keeps a pass cheap. Accounts from an
    `AccountBook` are attached to the new views only, unless the book
    differs from the last pass's: then to every view again.
    """

    def __init__(self) -> None:
        self._views: dict[int, tuple[float, JobView]] = {}
        # (dialect name, SQL, parameters) of the queue-order query.
        self._sql: tuple[str, str, Any] | None = None
        # The accounts the kept views carry (None: not attached).
        self._accounts: dict[str, str] | None = None
        # Each queued job's `queued_at` as the last `load` read it.
        self.queued_at: dict[int, float] = {}

    def load(self, session: Session, book: AccountBook | None = None) -> list[JobView]:
        # The one query of a pass that grows with the queue: run it on the
        # driver's cursor (compiled once for the database's dialect),
        # skipping SQLAlchemy's per-row processing.
        connection = session.connection()
        if self._sql is None or self._sql[0] != connection.dialect.name:
            sql, params = driver_statement(_QUEUE_ORDER, connection.dialect)
            self._sql = (connection.dialect.name, sql, params)
        _, sql, params = self._sql
        cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]  # None only once the connection is closed
        try:
            cursor.execute(sql, params)
            order = cursor.fetchall()
        finally:
            cursor.close()
        self.queued_at = dict(order)
        views = self._views
        missing = [i for i, q in order if (hit := views.get(i)) is None or hit[0] != q]
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            for r in connection.execute(_VIEWS_OF, {"ids": chunk}):
                view = JOBS.from_row(r)
                views[view.id] = (r.queued_at, view)
        if len(views) > 2 * len(order) + 1000:
            self._views = views = {i: views[i] for i, _ in order}
        if book is not None:
            # Kept attached, so with the same accounts only the views built
            # now need theirs: attaching the whole queue on every pass was a
            # twentieth of the server's CPU with 6,000 jobs queued.
            unattached = missing if book.accounts == self._accounts else [i for i, _ in order]
            for i in unattached:
                queued, view = views[i]
                if (new := book.attach(view)) is not view:
                    views[i] = (queued, new)
            self._accounts = book.accounts
        else:
            self._accounts = None
        return [views[i][1] for i, _ in order]


def build(
    session: Session,
    now: float,
    cache: PendingCache | Kept | None = None,
    goodput: bool = False,
    stopping_as_running: bool = False,
) -> Snapshot:
    """The cluster now; with `goodput`, the jobs' goodput reports too
    (`ClusterView.goodput`, for a policy that `uses_goodput`).

    `stopping_as_running`: jobs being preempted count as running on the GPUs
    they still hold (the scheduler's pass under tenant queues). The
    fair-share layer then counts them for their queue until they are gone,
    and takes them first when it makes room again, instead of lending the
    GPUs a reclaim is freeing back to the queue they were taken from (a
    reclaim's start waits for its victims to exit, over several passes).
    """
    running: list[JobView] = []
    attempts: dict[int, int] = {}
    # Without queues, a run being preempted is shown gone and its GPUs free,
    # as a simulated preemption frees them at once: a pass between the
    # preemption and its victim's exit then sees room made for the job it
    # was made for, and does not stop another job for it. A start there
    # waits for the exit (`run_pass` defers starts on GPUs still held). A
    # job moving or resizing keeps its GPUs shown held: it resumes on them
    # (or on the target they reserve) before any pass places another job.
    exiting: set[tuple[int, int]] = set()
    book = AccountBook(session)
    kept = cache if not isinstance(cache, PendingCache) else None
    for held in kept.running.load(session) if kept is not None else _holding(session):
        view = held.view
        if held.state is JobState.PREEMPTING and not stopping_as_running:
            if held.resume_kind is None:
                exiting.add((view.id, held.attempt))
            continue
        # (A job moving or resizing is not: it resumes on its GPUs or target.)
        stopping = held.state is JobState.PREEMPTING and held.resume_kind is None
        account = book.account(view.user)
        if view.account != account or view.stopping != stopping:
            # Kept attached (`held` is the kept copy), so the next pass reuses it.
            held.view = view = rebuild(view, account=account, stopping=stopping)
        running.append(view)
        attempts[view.id] = held.attempt
    queue = kept.pending if kept is not None else cache if isinstance(cache, PendingCache) else None
    pending = (
        queue.load(session, book)
        if queue is not None
        else [book.attach(v) for v in pending_views(session)]
    )
    if kept is not None:
        nodes, holders = kept.nodes.load(session, running, exiting)
    else:
        nodes, holders, _ = load_nodes(session, running, exiting)
    # On PostgreSQL each read sees what was committed when it began: a job
    # that ended between the read of the running jobs and that of the GPUs'
    # holders would be free on the nodes the policy sees and held in the
    # ledger that checks it, which then refuses the pass (issue 36). A job
    # none of whose GPUs is held any more, and whose state says it ended when
    # read again, is left out, as if the first read had come after its end.
    # (One whose state still holds them stays: rows from before allocations
    # were written for every run, e.g. an upgraded database.)
    unheld = [j.id for j in running if not _holds(j, attempts[j.id], holders)]
    if unheld:
        ended = _ended(session, unheld)
        running = [j for j in running if j.id not in ended]
    # GPUs held by anything but the current attempt of a running job or an
    # exiting one: an old attempt, a moving job's next, a cancelled job.
    draining: dict[tuple[int, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for (node, gpu), (job_id, attempt) in holders.items():
        if attempts.get(job_id) != attempt and (job_id, attempt) not in exiting:
            draining[(job_id, attempt)][node].append(gpu)
    jobs = {j.id: j for j in pending}
    jobs.update({j.id: j for j in running})
    # What became of the jobs that waiting jobs depend on (one query, when any do).
    named = [i for j in pending if j.dependency for i in dependency_rule.named(j.dependency)]
    return Snapshot(
        view=ClusterView(
            now=now,
            nodes=nodes,
            pending=tuple(pending),
            running=tuple(running),
            # The declared queues and their decayed usage (None: no queues),
            # read by the fair-share layer the scheduler wraps every policy in.
            tenancy=queues.tenancy(session, now),
            goodput=goodput_reports.load(session) if goodput else None,
            outcomes=dependencies.outcomes(session, named) if named else None,
        ),
        jobs=jobs,
        holders=holders,
        draining={k: dict(v) for k, v in draining.items()},
    )


def _holding(session: Session) -> list[Held]:
    """The jobs holding GPUs, read afresh (`live_views.RunningCache` keeps them)."""
    return [
        Held(JOBS.from_row(r), r.state, r.attempt, r.resume_kind)
        for r in session.connection().execute(_HOLDING_VIEWS)
    ]


def _holds(job: JobView, attempt: int, holders: dict[tuple[str, int], tuple[int, int]]) -> bool:
    """Whether `holders` (read after `job`) has any GPU of its placement still held
    by its attempt. Not all: a gang frees its GPUs part by part, and a job
    moving holds its old GPUs under its attempt and the target's under the next."""
    if job.placement is None or job.placement.num_gpus == 0:
        return True  # a CPU-only job holds no GPU to lose
    held = (job.id, attempt)
    return any(holders.get((node, gpu)) == held for node, gpus in job.placement for gpu in gpus)


def _ended(session: Session, ids: list[int]) -> set[int]:
    """Which of `ids` no longer hold GPUs by their state (read now, after the holders)."""
    query = select(col(Job.id)).where(col(Job.id).in_(ids), col(Job.state).not_in(HOLDING))
    return set(session.execute(query).scalars())


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


def _count_on_healthy(column: Any) -> Any:
    return (
        select(func.count())
        .select_from(column.table.join(Node.__table__, column == Node.name))
        .where(col(Node.healthy))
        .scalar_subquery()
    )


# One statement: is there anything a pass could do? States are bound
# parameters from the enum, never literals in the SQL.
_COULD_CHANGE = select(
    _count_on_healthy(Gpu.__table__.c.node) - _count_on_healthy(Allocation.__table__.c.node),
    exists().where(col(Job.state).in_(HOLDING), col(Job.preemptible)),
    # Its zeros written in the SQL, as in the partial index `ix_job_gpuless`
    # (migration 0020), so that a plan made without the parameters matches it too.
    exists().where(
        col(Job.state) == JobState.PENDING,
        or_(col(Job.gpus) == literal_column("0"), col(Job.min_gpus) == literal_column("0")),
    ),
)


def could_change(session: Session) -> bool:
    """False when no pass could start or preempt anything: no free GPU on a
    healthy node, no running job that may be preempted and no queued job
    that needs no GPU. Saves the full snapshot while the cluster is full."""
    free, preemptible, gpuless = session.connection().execute(_COULD_CHANGE).one()
    return bool(free > 0 or preemptible or gpuless)
