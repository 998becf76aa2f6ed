"""Read-only page data for the Cluster, Queue and Policy pages.

Owns one function per page, each run in one database session and
returning a typed bundle the template renders. They reuse the server's
services: `nodes.list_nodes` (GPUs with their holders and latest
heartbeat samples), `queue.read` (the pending jobs in the order the
policy in force considers them, from the same `ClusterView` the
scheduler hands it, with the words `schedulearn show` uses for why a job
waits) and `policy` (the spec in force).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlmodel import Session, col

from schedulearn.core import JobView, NodeView
from schedulearn.core.registry import describe, options_of
from schedulearn.protocol import GpuSample, JobState, NodePublic, PolicyPublic
from schedulearn.server.models import Job
from schedulearn.server.services import nodes as node_service
from schedulearn.server.services import policy as policy_service
from schedulearn.server.services import queue as queue_service

VIRTUAL = "virtual"  # the GPU type an agent declares for --gpus N


@dataclass(frozen=True, slots=True)
class JobBrief:
    """Enough of a job to label the GPUs it holds."""

    id: int
    name: str
    user: str
    state: JobState
    started_at: float | None


@dataclass(slots=True)
class ClusterPage:
    nodes: list[NodePublic]
    holders: dict[int, JobBrief]
    by_state: dict[str, int]
    policy: str
    gpus_total: int = 0
    gpus_busy: int = 0
    gpus_down: int = 0
    nodes_down: int = 0
    mean_util: float | None = None


def _by_state(session: Session) -> dict[str, int]:
    rows = session.execute(select(col(Job.state), func.count()).group_by(col(Job.state))).all()
    return {str(state): int(n) for state, n in rows}


def cluster_page(
    session: Session, samples: Mapping[str, list[GpuSample]], default_policy: str
) -> ClusterPage:
    listing = node_service.list_nodes(session, samples)
    held = {g.job_id for n in listing.items for g in n.gpus if g.job_id is not None}
    holders: dict[int, JobBrief] = {}
    if held:
        rows = session.execute(
            select(
                col(Job.id), col(Job.name), col(Job.user), col(Job.state), col(Job.started_at)
            ).where(col(Job.id).in_(held))
        )
        holders = {r[0]: JobBrief(r[0], r[1], r[2], JobState(r[3]), r[4]) for r in rows}
    page = ClusterPage(
        nodes=listing.items,
        holders=holders,
        by_state=_by_state(session),
        policy=policy_service.current_spec(session, default_policy),
    )
    utils = []
    for node in listing.items:
        if not node.healthy:
            page.nodes_down += 1
            page.gpus_down += len(node.gpus)
            continue
        page.gpus_total += len(node.gpus)
        page.gpus_busy += sum(1 for g in node.gpus if g.job_id is not None)
        # Virtual GPUs (agents started with --gpus N) have no meter: they always read 0.
        utils += [
            g.utilization_pct
            for g in node.gpus
            if g.utilization_pct is not None and g.type != VIRTUAL
        ]
    page.mean_util = sum(utils) / len(utils) if utils else None
    return page


@dataclass(frozen=True, slots=True)
class QueueRow:
    position: int
    job: JobView
    reason: str


@dataclass(slots=True)
class QueuePage:
    rows: list[QueueRow]
    policy: str
    rule: str
    exact: bool
    nodes: tuple[NodeView, ...]
    running: int
    free_gpus: int = 0
    total_gpus: int = 0
    per_node_free: list[tuple[str, int, int, bool]] = field(default_factory=list)


def queue_page(session: Session, default_policy: str, now: float) -> QueuePage:
    queue = queue_service.read(session, default_policy, now)
    view = queue.view
    rows = [QueueRow(i + 1, job, queue.reason(job, i)) for i, job in enumerate(queue.order.jobs)]
    page = QueuePage(
        rows=rows,
        policy=queue.spec,
        rule=queue.order.rule,
        exact=queue.order.exact,
        nodes=view.nodes,
        running=len(view.running),
    )
    for node in view.nodes:
        page.per_node_free.append((node.name, node.num_free_gpus, node.num_gpus, node.healthy))
        if node.healthy:
            page.free_gpus += node.num_free_gpus
            page.total_gpus += node.num_gpus
    return page


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    name: str
    description: str
    options: dict[str, str]


@dataclass(slots=True)
class PolicyPage:
    current: PolicyPublic
    policies: list[PolicyInfo]


def policy_infos(names: list[str]) -> list[PolicyInfo]:
    infos = []
    for name in names:
        options = {
            k: repr(v) if isinstance(v, str) else str(v) for k, v in options_of(name).items()
        }
        infos.append(PolicyInfo(name, describe(name), options))
    return infos


def policy_page(session: Session, default_policy: str) -> PolicyPage:
    current = policy_service.get(session, default_policy)
    return PolicyPage(current, policy_infos(current.available))
