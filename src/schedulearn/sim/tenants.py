"""Simulated tenants: queues for a workload, and the per-queue fairness report.

`tenancy_for("philly", workload, cluster)` makes every queue the jobs
name (the Philly trace's 15 virtual clusters: its loader puts the
`cluster` column in `JobView.queue`) a queue guaranteed GPUs in
proportion to its GPU-hours in the workload, whole GPUs by largest
remainder, all of the cluster's GPUs shared out. `tenancy_for(PATH, ...)`
reads a queue file (TOML):

    [queues.team-a]
    guaranteed = 8            # or { v100 = 4, k80 = 8 }
    limit = 16                # optional
    weight = 2                # optional, default 1
    half_life = 604800        # optional, top level: usage half-life in seconds

`fairness` compares a shared run with each queue run alone on a cluster
of exactly its guaranteed GPUs (nodes as large as the shared cluster's):
per queue the mean JCT, mean slowdown and the sharing-incentive ratio
(the shared mean JCT over the alone mean JCT of the same jobs; at most 1
means no team is worse off for sharing), and Jain's index over the
per-queue mean slowdowns. There is no alone run for a queue guaranteed
0 GPUs, and a job larger than its queue's guarantee cannot run alone:
those jobs are left out of the ratio and `QueueFairness.note` says so,
rather than the ratio dividing by a cluster the queue was never promised.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from schedulearn.core.fairshare_queues import Queue, Tenancy
from schedulearn.core.views import NodeView
from schedulearn.sim.cluster import ClusterSpec
from schedulearn.sim.jobs import SimInputError, Workload
from schedulearn.sim.metrics import jain
from schedulearn.sim.results import SimResult, job_units

WEEK = 7 * 24 * 3600.0


def tenancy_for(spec: str, workload: Workload, total_gpus: int) -> Tenancy:
    """Queues from `philly` (shares of the workload's GPU-hours) or a queue file."""
    if spec.strip().lower() == "philly":
        tenancy = proportional(workload, total_gpus)
    else:
        tenancy = load_queue_file(Path(spec))
    missing = sorted({j.queue for j in workload.jobs} - set(tenancy.by_name))
    if missing:
        shown = ", ".join(repr(m) for m in missing[:5])
        raise SimInputError(
            f"workload {workload.name!r} has jobs in queues the queue file does not define: "
            f"{shown}{' ...' if len(missing) > 5 else ''}; add them to {spec}"
        )
    return tenancy


def proportional(
    workload: Workload,
    total_gpus: int,
    half_life: float = WEEK,
    share_out: bool = False,
    parents: int = 0,
) -> Tenancy:
    """Every queue named by the jobs, guaranteed GPUs in proportion to its GPU-hours.

    Rounded down: the few GPUs the fractions leave are promised to nobody
    and lent by weight, so a queue whose GPU-hours round to 0 GPUs (many
    short jobs) still has a deserved share of them. `share_out` hands them
    out instead (largest remainder first), promising the whole cluster.
    `parents` groups the queues under that many parent queues (`group-1`
    ...), balanced by GPU-hours, each guaranteed what its children are.
    """
    hours: dict[str, float] = {}
    for j in workload.jobs:
        hours[j.queue] = hours.get(j.queue, 0.0) + j.gpus * (j.duration or 0.0)
    if not hours or (len(hours) == 1 and "" in hours):
        raise SimInputError(
            f"workload {workload.name!r} names no queues (the Philly trace's cluster column "
            "does); give a queue file with --tenants FILE"
        )
    total = sum(hours.values()) or 1.0
    exact = {q: total_gpus * h / total for q, h in hours.items()}
    whole = {q: math.floor(x) for q, x in exact.items()}
    left = total_gpus - sum(whole.values()) if share_out else 0
    for q in sorted(exact, key=lambda q: (whole[q] - exact[q], q))[:left]:
        whole[q] += 1
    parent_of = _groups(hours, parents)
    queues = [Queue.of(q or "default", whole[q], parent=parent_of.get(q)) for q in sorted(hours)]
    for group in sorted(set(parent_of.values())):
        promised = sum(whole[q] for q, p in parent_of.items() if p == group)
        queues.append(Queue.of(group, promised))
    return Tenancy(tuple(queues), half_life=half_life)


def _groups(hours: Mapping[str, float], parents: int) -> dict[str, str]:
    """Each named queue's parent: the group with the fewest GPU-hours so far,
    the queues taken largest first (the default queue stays out of trees)."""
    if parents <= 0:
        return {}
    load = {f"group-{i + 1}": 0.0 for i in range(parents)}
    out: dict[str, str] = {}
    for q in sorted((q for q in hours if q), key=lambda q: (-hours[q], q)):
        group = min(load, key=lambda g: (load[g], g))
        out[q] = group
        load[group] += hours[q]
    return out


def load_queue_file(path: Path) -> Tenancy:
    if not path.is_file():
        raise SimInputError(f"queue file {str(path)!r} does not exist; give philly or a TOML file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SimInputError(f"queue file {str(path)!r} is not valid TOML: {exc}") from None
    table = data.get("queues")
    if not isinstance(table, dict) or not table:
        raise SimInputError(f"queue file {str(path)!r} has no [queues.NAME] tables; add one")
    queues = []
    for name, spec in table.items():
        try:
            queues.append(_queue(name, spec))
        except (TypeError, ValueError) as exc:
            raise SimInputError(f"queue file {str(path)!r}, queue {name!r}: {exc}") from None
    half_life = data.get("half_life", WEEK)
    try:
        return Tenancy(
            tuple(queues), half_life=None if half_life in (0, None) else float(half_life)
        )
    except ValueError as exc:
        raise SimInputError(f"queue file {str(path)!r}: {exc}") from None


def _queue(name: str, spec: object) -> Queue:
    if not isinstance(spec, dict):
        raise TypeError(
            'write guaranteed = N, limit = N, weight = W, parent = "P" under [queues.NAME]'
        )
    unknown = sorted(set(spec) - {"guaranteed", "limit", "weight", "parent"})
    if unknown:
        raise ValueError(
            f"unknown keys {', '.join(unknown)}; use guaranteed, limit, weight, parent"
        )
    g = spec.get("guaranteed", 0)
    guaranteed: Mapping[str, int] = (
        {str(k): v for k, v in g.items()} if isinstance(g, dict) else ({"": g} if g else {})
    )
    parent = spec.get("parent")
    if parent is not None and not isinstance(parent, str):
        raise TypeError(f'write parent = "NAME" (a queue\'s name), not {parent!r}')
    return Queue(name, guaranteed, spec.get("limit"), float(spec.get("weight", 1.0)), parent)


def alone_cluster(queue: Queue, shared: ClusterSpec) -> ClusterSpec | None:
    """A cluster of the queue's guaranteed GPUs, in nodes like the shared cluster's
    (None for a queue guaranteed none)."""
    size = queue.guaranteed_gpus
    if size <= 0:
        return None
    per = max(1, shared.largest_node_gpus)
    template = shared.nodes[0]
    sizes = [per] * (size // per) + ([size % per] if size % per else [])
    nodes = tuple(
        NodeView.new(
            f"n{i}",
            g,
            template.gpu_type,
            template.cpus * g / max(1, template.num_gpus),
            template.memory_gb * g / max(1, template.num_gpus),
        )
        for i, g in enumerate(sizes)
    )
    return ClusterSpec(f"{queue.name}-alone-{size}", nodes)


def queue_workload(workload: Workload, queue: str, max_gpus: int | None = None) -> Workload:
    """The queue's jobs (those of at most `max_gpus` GPUs, when given)."""
    jobs = tuple(
        j for j in workload.jobs if j.queue == queue and (max_gpus is None or j.gpus <= max_gpus)
    )
    return Workload(f"{workload.name}[{queue}]", jobs, workload.description, workload.source)


@dataclass(frozen=True, slots=True)
class QueueFairness:
    """One queue's figures in a shared run, and alone."""

    queue: str
    guaranteed: int
    jobs: int
    mean_jct: float
    mean_slowdown: float
    alone_mean_jct: float | None
    # The shared run's mean JCT over the jobs the alone run had.
    compared_jct: float | None = None
    # Why the ratio leaves jobs out, or is missing (by construction).
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """Sharing-incentive ratio: shared over alone mean JCT, on the same jobs."""
        if self.alone_mean_jct is None or self.alone_mean_jct <= 0 or self.compared_jct is None:
            return None
        return self.compared_jct / self.alone_mean_jct


@dataclass(frozen=True, slots=True)
class Fairness:
    queues: tuple[QueueFairness, ...]
    jain: float

    @property
    def worst_ratio(self) -> float:
        return max((q.ratio for q in self.queues if q.ratio is not None), default=0.0)

    def to_dict(self) -> dict[str, object]:
        """For JSON: Jain's index, the worst ratio and each queue's figures."""
        return {
            "jain": self.jain,
            "worst_ratio": self.worst_ratio,
            "queues": [{**dataclasses.asdict(q), "ratio": q.ratio} for q in self.queues],
        }


def job_jcts(result: SimResult) -> dict[str, dict[int, tuple[float, float]]]:
    """Per queue, each finished job's (JCT, slowdown)."""
    by: dict[str, dict[int, tuple[float, float]]] = {}
    queue_of = {r.id: r.queue for r in result.records}
    for u in job_units(result.records):
        if u.end is None or not isinstance(u.key, int):
            continue
        jct = u.end - u.submitted_at
        slow = jct / u.isolated if u.isolated else 1.0
        by.setdefault(queue_of[u.key], {})[u.key] = (jct, slow)
    return by


def per_queue(result: SimResult) -> dict[str, tuple[int, float, float]]:
    """Per queue: finished jobs, mean JCT, mean slowdown."""
    return {
        q: (len(v), sum(j for j, _ in v.values()) / len(v), sum(s for _, s in v.values()) / len(v))
        for q, v in job_jcts(result).items()
    }


def fairness(shared: SimResult, alone: Mapping[str, SimResult], tenancy: Tenancy) -> Fairness:
    figures = job_jcts(shared)
    rows = []
    for name in sorted(figures):
        jobs = figures[name]
        n = len(jobs)
        jct = sum(j for j, _ in jobs.values()) / n
        slow = sum(s for _, s in jobs.values()) / n
        g = tenancy.queue(name).guaranteed_gpus
        solo = alone.get(name)
        solo_jct = compared = None
        note = ""
        if g <= 0:
            note = "guaranteed 0 GPUs: no alone run, slowdown only"
        elif solo is None:
            note = f"every job needs more than its {g} guaranteed GPUs: no alone run"
        else:
            ids = [r.id for r in solo.records if r.id in jobs]
            if ids:
                solo_jct = solo.summary.mean_jct
                compared = sum(jobs[i][0] for i in ids) / len(ids)
            left_out = n - len(ids)
            if left_out:
                note = (
                    f"{left_out} of {n} jobs need more than its {g} guaranteed GPUs: "
                    "ratio over the others"
                )
        rows.append(QueueFairness(name, g, n, jct, slow, solo_jct, compared, note))
    return Fairness(tuple(rows), jain([r.mean_slowdown for r in rows]))


def render(fair: Fairness) -> str:
    lines = [
        f"{'queue':<14} {'guar.':>6} {'jobs':>7} {'mean JCT s':>11} {'slowdown':>9} "
        f"{'alone JCT s':>12} {'ratio':>6}"
    ]
    notes = []
    for q in fair.queues:
        ratio = "-" if q.ratio is None else f"{q.ratio:.3f}"
        alone = "-" if q.alone_mean_jct is None else f"{q.alone_mean_jct:,.0f}"
        mark = " *" if q.note else ""
        lines.append(
            f"{q.queue:<14} {q.guaranteed:>6} {q.jobs:>7,} {q.mean_jct:>11,.0f} "
            f"{q.mean_slowdown:>9.2f} {alone:>12} {ratio:>6}{mark}"
        )
        if q.note:
            notes.append(f"  * {q.queue}: {q.note}")
    lines.extend(notes)
    lines.append(
        f"Jain's index over per-queue slowdowns: {fair.jain:.3f}; "
        f"worst ratio {fair.worst_ratio:.3f}"
    )
    return "\n".join(lines)


def queues_of(workload: Workload) -> Sequence[str]:
    return sorted({j.queue for j in workload.jobs})
