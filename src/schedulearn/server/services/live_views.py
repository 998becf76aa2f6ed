"""The running jobs and the nodes as core views, kept between passes (owned by
the scheduler loop, like `snapshot.PendingCache` for the queue).

A pass needs every job that holds GPUs and every node as a view. Built
from the database each pass, that was most of a live pass at scale
(issue 36: 1,000 nodes, 4,000 running jobs: JSON decoding, view building
and the ORM for every row, every pass, against a policy decision of tens
of milliseconds). Here each pass still reads every row, but raw, on the
driver's cursor (the statement compiled once per dialect, no SQLAlchemy
row processing), and builds a view again only for a row that differs in
any column from the one its kept view was built from. The database stays
the truth: nothing is kept that a fresh read would not give, and a new
scheduler (a restart, another replica taking the lock) starts empty.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, bindparam, or_, select
from sqlmodel import Session, col

from schedulearn.core import GpuView, JobView, NodeView
from schedulearn.core.views import rebuild
from schedulearn.protocol import JobState
from schedulearn.server.models import Allocation, Gpu, Job, Node
from schedulearn.server.services.snapshot import (
    HOLDING,
    JOBS,
    NODES,
    Held,
    PendingCache,
    driver_statement,
)

_CHUNK = 500  # ids per re-read (SQLite's bound-parameter limit is far above)


class _RawQuery:
    """A fixed statement run on the driver's cursor: rows as plain tuples."""

    def __init__(self, statement: Select[*tuple[Any, ...]]) -> None:
        self.statement = statement
        self._sql: tuple[str, str, Any] | None = None  # (dialect, SQL, parameters)

    def rows(self, connection: Connection) -> list[tuple[Any, ...]]:
        if self._sql is None or self._sql[0] != connection.dialect.name:
            sql, params = driver_statement(self.statement, connection.dialect)
            self._sql = (connection.dialect.name, sql, params)
        _, sql, params = self._sql
        cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]  # None only once the connection is closed
        try:
            cursor.execute(sql, params)
            return [tuple(r) for r in cursor.fetchall()]
        finally:
            cursor.close()


_HELD_COLUMNS = (*JOBS.columns, col(Job.state), col(Job.attempt), col(Job.resume_kind))
# States as equalities: an IN list would be an expanding parameter, which the
# driver's own cursor cannot take.
_HOLDING_RAW = _RawQuery(
    select(*_HELD_COLUMNS).where(or_(*(col(Job.state) == state for state in HOLDING)))
)
_HOLDING_OF = select(*_HELD_COLUMNS).where(
    col(Job.id).in_(bindparam("ids", expanding=True)), col(Job.state).in_(HOLDING)
)


class RunningCache:
    """The jobs in a state that holds GPUs (assigned, running, preempting)."""

    def __init__(self) -> None:
        # job id -> (the raw row its view was built from, the job)
        self._kept: dict[int, tuple[tuple[Any, ...], Held]] = {}
        self.built = 0  # views built from rows (for tests: how much was kept)

    def load(self, session: Session) -> list[Held]:
        connection = session.connection()
        raw = _HOLDING_RAW.rows(connection)
        kept = self._kept
        missing = [r[0] for r in raw if (hit := kept.get(r[0])) is None or hit[0] != r]
        fresh: dict[int, Held] = {}
        for start in range(0, len(missing), _CHUNK):
            ids = missing[start : start + _CHUNK]
            for row in connection.execute(_HOLDING_OF, {"ids": ids}):
                fresh[row.id] = Held(
                    JOBS.from_row(row), JobState(row.state), row.attempt, row.resume_kind
                )
        self.built += len(fresh)
        out: list[Held] = []
        now_kept: dict[int, tuple[tuple[Any, ...], Held]] = {}
        for r in raw:
            job_id = r[0]
            held = fresh.get(job_id)
            if held is None:
                hit = kept.get(job_id)
                if hit is None or hit[0] != r:
                    continue  # it stopped holding GPUs between the two reads
                held = hit[1]
            # A row re-read newer than `r` is kept under `r`: the next pass
            # sees the difference and builds it again.
            now_kept[job_id] = (r, held)
            out.append(held)
        self._kept = now_kept
        return out


_NODES_RAW = _RawQuery(select(*NODES.columns))
_NODES_OF = select(*NODES.columns).where(col(Node.name).in_(bindparam("names", expanding=True)))
_GPUS_RAW = _RawQuery(
    select(col(Gpu.node), col(Gpu.index), col(Gpu.uuid), col(Gpu.type), col(Gpu.memory_mb))
)
_HOLDERS_RAW = _RawQuery(
    select(
        col(Allocation.node),
        col(Allocation.gpu_index),
        col(Allocation.job_id),
        col(Allocation.attempt),
    )
)
Holders = dict[tuple[str, int], tuple[int, int]]


class NodeCache:
    """Every known node, each kept as its view with every GPU free and nothing
    reserved; a pass lays the GPUs' holders and the running jobs' CPUs and
    memory over it (`snapshot.load_nodes`, from kept parts)."""

    def __init__(self) -> None:
        # name -> ((its raw row, its GPUs' raw rows), its idle view)
        self._kept: dict[str, tuple[tuple[Any, ...], NodeView]] = {}
        self.built = 0

    def load(
        self,
        session: Session,
        running: Sequence[JobView],
        exiting: set[tuple[int, int]] | frozenset[tuple[int, int]] = frozenset(),
    ) -> tuple[tuple[NodeView, ...], Holders]:
        """The nodes as `snapshot.load_nodes` gives them, and the GPUs' holders."""
        connection = session.connection()
        rows = _NODES_RAW.rows(connection)
        gpus: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        for g in _GPUS_RAW.rows(connection):
            gpus[g[0]].append(g)
        holders: Holders = {(n, g): (j, a) for n, g, j, a in _HOLDERS_RAW.rows(connection)}
        # In Python's order of names, as `load_nodes` (not the database's collation).
        keys = {
            r[0]: (r, tuple(sorted(gpus.get(r[0], ())))) for r in sorted(rows, key=lambda r: r[0])
        }
        idle = self._idle_views(connection, keys)
        used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for job in running:
            if job.placement is None:
                continue
            for name, on in job.placement:
                node = idle.get(name)
                cpus, mem = job.demand_on(job.placement, len(on), node.cpus if node else 0.0)
                used[name][0] += cpus
                used[name][1] += mem
        shown: dict[str, dict[int, int]] = defaultdict(dict)
        for (name, index), run in holders.items():
            if run not in exiting:
                shown[name][index] = run[0]
        views = []
        for name in keys:
            view = idle.get(name)
            if view is None:
                continue  # removed between the reads
            held, (cpus, mem) = shown.get(name), used.get(name, (0.0, 0.0))
            if held or cpus or mem:
                gpus_now = view.gpus
                if held:
                    gpus_now = tuple(
                        g
                        if g.index not in held
                        else GpuView(g.index, g.type, g.uuid, g.memory_mb, held[g.index])
                        for g in view.gpus
                    )
                view = rebuild(
                    view,
                    gpus=gpus_now,
                    free_cpus=view.cpus - cpus,
                    free_memory_gb=view.memory_gb - mem,
                )
            views.append(view)
        return tuple(views), holders

    def _idle_views(
        self, connection: Connection, keys: dict[str, tuple[Any, ...]]
    ) -> dict[str, NodeView]:
        kept = self._kept
        missing = [n for n, key in keys.items() if (hit := kept.get(n)) is None or hit[0] != key]
        fresh: dict[str, NodeView] = {}
        for start in range(0, len(missing), _CHUNK):
            names = missing[start : start + _CHUNK]
            for r in connection.execute(_NODES_OF, {"names": names}):
                gpu_views = tuple(GpuView(i, t, u, m) for _, i, u, t, m in keys[r.name][1])
                fresh[r.name] = NODES.from_row(
                    r, gpus=gpu_views, free_cpus=r.cpus, free_memory_gb=r.memory_gb
                )
        self.built += len(fresh)
        now_kept: dict[str, tuple[tuple[Any, ...], NodeView]] = {}
        for name, key in keys.items():
            view = fresh.get(name)
            if view is None:
                hit = kept.get(name)
                if hit is None or hit[0] != key:
                    continue
                view = hit[1]
            now_kept[name] = (key, view)
        self._kept = now_kept
        return {n: v for n, (_, v) in now_kept.items()}


class Kept:
    """What one scheduler keeps between its passes: the queue, the running jobs
    and the nodes (`snapshot.build` takes it)."""

    def __init__(self) -> None:
        self.pending = PendingCache()
        self.running = RunningCache()
        self.nodes = NodeCache()
