"""What the queues promise together, against the GPUs the cluster has.

Owns when `queue add|set` applies the core's rule
(`fairshare_reasons.overcommitted`: the guarantees of all queues together
may not exceed the cluster's GPUs), and the same rule per GPU type a
guarantee names, unless the admin says `--overcommit`. A promise
the cluster cannot keep is worse than none: a queue "guaranteed" GPUs
that another queue's guarantee also covers is not guaranteed them, and
every fair-share figure is then measured against a cluster that does
not exist. In a queue tree only the root queues count: a child's
guarantee is part of its parent's (`core.fairshare_fill.check_tree`
keeps it within). Only a change that raises the promises is checked
(a guarantee raised, a child moved out of its parent), so an admin can
always lower one (and a node leaving does not lock the queues). The
cluster is every registered node, up or down (a down node may come
back); with no node registered yet nothing can be judged and nothing is
refused, as for a submission (`waiting.never_servable`).

Reads `tenant_queue`, `gpu`; writes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlmodel import Session, col

from schedulearn.core.fairshare_queues import Queue
from schedulearn.core.fairshare_reasons import overcommitted
from schedulearn.core.fairshare_reasons import promised as promised_gpus
from schedulearn.server.errors import BadRequest
from schedulearn.server.models import Gpu, TenantQueue
from schedulearn.server.services.queues import core_queue


@dataclass(frozen=True, slots=True)
class Promised:
    """Guaranteed GPUs over all queues, and the cluster's GPUs, in all and per type."""

    total: int  # over the root queues (a child's guarantee is within its parent's)
    cluster: int
    by_type: Mapping[str, int]  # typed guarantees ("v100" -> GPUs), summed over root queues
    cluster_by_type: Mapping[str, int]
    by_queue: Mapping[str, int]  # each queue's guaranteed GPUs, every type
    roots: tuple[Queue, ...] = ()  # the root queues, as the core has them


def _guaranteed(row: TenantQueue) -> dict[str, int]:
    return {str(t): int(n) for t, n in (row.guaranteed or {}).items() if int(n) > 0}


def promised(session: Session, replace: TenantQueue | None = None) -> Promised:
    """The queues' promises now, or with `replace` (a new or changed queue) in its place."""
    rows = {r.name: r for r in session.execute(select(TenantQueue)).scalars()}
    if replace is not None:
        rows[replace.name] = replace
    by_type: Counter[str] = Counter()
    by_queue: dict[str, int] = {}
    for name, row in sorted(rows.items()):
        g = _guaranteed(row)
        by_queue[name] = sum(g.values())
        if not row.parent:
            by_type.update({t: n for t, n in g.items() if t})
    roots = tuple(core_queue(r) for _, r in sorted(rows.items()) if not r.parent)
    cluster_by_type: dict[str, int] = {
        str(t): int(n)
        for t, n in session.execute(select(col(Gpu.type), func.count()).group_by(col(Gpu.type)))
    }
    return Promised(
        total=promised_gpus(roots),
        cluster=sum(cluster_by_type.values()),
        by_type=dict(by_type),
        cluster_by_type={t: n for t, n in cluster_by_type.items() if t},
        by_queue=by_queue,
        roots=roots,
    )


def check(session: Session, row: TenantQueue, before: Promised, overcommit: bool) -> None:
    """Refuse `row` (added, or changed from the queues' promises `before`) when it
    raises the promises beyond the cluster's GPUs and `overcommit` was not given."""
    if overcommit:
        return
    p = promised(session, row)
    if p.cluster == 0:
        return  # no node yet: nothing to judge against
    hint = (
        f"lower a guarantee (`schedulearn queue set {row.name} --guaranteed N`), add GPUs, "
        "or pass --overcommit to promise more than the cluster has"
    )
    why = overcommitted(p.roots, p.cluster)  # the core's rule, over every GPU type
    if why and p.total > before.total:
        raise BadRequest(f"{why} (`schedulearn queue set {row.name} --guaranteed N`)")
    for gpu_type, n in sorted(p.by_type.items()):
        have = p.cluster_by_type.get(gpu_type, 0)
        if n > have and n > before.by_type.get(gpu_type, 0):
            types = ", ".join(f"{c} {t}" for t, c in sorted(p.cluster_by_type.items()))
            raise BadRequest(
                f"the queues' {gpu_type} guarantees would total {n} GPUs, more than the "
                f"cluster's {have} {gpu_type} GPUs (it has {types or 'no typed GPUs'}); {hint}"
            )
