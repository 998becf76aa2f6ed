"""Which waiting jobs may start in a pass, and on which nodes: the rules
that hold for every policy, applied to the snapshot before the policy sees it.

- a held job (`schedulearn hold`) does not start until released;
- a job array with a limit (`--array 0-9%2`) never has more than that many
  tasks running at once: its waiting tasks beyond the free slots sit out
  the pass (lowest id first gets the slots);
- a job with a dependency (`--dependency afterok:12`) waits until the jobs
  it names have ended as it asks (`core.dependencies`); one whose
  dependency can never be met is `doomed`, and the host cancels it;
- a drained node (`schedulearn nodes drain`) takes no new job: the policy
  sees it as unavailable, so nothing is placed there, while its running
  jobs go on (the ledger still holds their GPUs).

`schedulable(view)` is the view a policy decides on; `set_aside(view)` says
why each job it drops waits, for `show` and `logs`; `doomed(view)` says which
can never start, and why. Standard library only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from schedulearn.core import dependencies
from schedulearn.core.views import ClusterView, JobView


def doomed(view: ClusterView) -> dict[int, str]:
    """The pending jobs whose dependency can never be met, each with why."""
    outcomes = view.outcomes or {}
    out: dict[int, str] = {}
    for job in view.pending:
        if job.dependency:
            verdict = dependencies.verdict(job.dependency, outcomes)
            if verdict.never:
                out[job.id] = verdict.reason
    return out


def set_aside(view: ClusterView) -> dict[int, str]:
    """The pending jobs that may not start this pass, each with why."""
    aside: dict[int, str] = {}
    # Most passes have no held job, dependency or limited array: skip the sort.
    if not any(j.held or j.dependency or j.array_limit is not None for j in view.pending):
        return aside
    running = Counter(j.array_id for j in view.running if j.array_id is not None)
    slots: dict[int, int] = {}
    for job in sorted(view.pending, key=lambda j: j.id):
        if job.held:
            aside[job.id] = "held; `schedulearn release` lets it start"
            continue
        if job.dependency:
            verdict = dependencies.verdict(job.dependency, view.outcomes or {})
            if not verdict.met:
                aside[job.id] = verdict.reason
                continue
        if job.array_id is None or job.array_limit is None:
            continue
        left = slots.setdefault(job.array_id, job.array_limit - running[job.array_id])
        if left <= 0:
            aside[job.id] = (
                f"array {job.array_id} already runs {running[job.array_id]} tasks, "
                f"its limit (%{job.array_limit})"
            )
        else:
            slots[job.array_id] = left - 1
    return aside


def schedulable(view: ClusterView) -> ClusterView:
    """`view` without the jobs `set_aside` drops, and with drained nodes unavailable."""
    aside = set_aside(view)
    pending: tuple[JobView, ...] = view.pending
    if aside:
        pending = tuple(j for j in view.pending if j.id not in aside)
    nodes, free = view.nodes, view.free_counts
    if any(n.drained and n.healthy for n in nodes):
        nodes = tuple(replace(n, healthy=False) if n.drained else n for n in nodes)
        if free is not None:
            free = tuple(0 if n.drained else c for n, c in zip(view.nodes, free, strict=True))
    if pending is view.pending and nodes is view.nodes:
        return view
    return replace(view, pending=pending, nodes=nodes, free_counts=free)
