"""Node-label constraints on simulated jobs, as `--constraint` gives them to live jobs.

A workload spec takes `constraint=LABEL[,LABEL]` (every job then needs
all those labels) and `constrained=SHARE` (only that share of the jobs,
drawn with the run's seed; the tasks of one group are drawn together);
`schedulearn simulate --constraint LABEL [--constrained SHARE]` does the
same for any workload, trace files included. The cluster gives nodes
labels (`--cluster 2x8:label=ib+4x4`), and every policy then places a
constrained job only on labelled nodes (`core.capabilities.can_run`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from schedulearn.core.capabilities import check_label
from schedulearn.sim.jobs import SimInputError, Workload


def with_constraints(
    workload: Workload, labels: Sequence[str], share: float = 1.0, seed: int = 0
) -> Workload:
    """`workload` with `labels` added to the constraints of `share` of its jobs."""
    if not labels:
        return workload
    if not 0.0 <= share <= 1.0:
        raise SimInputError(f"constrained share must be between 0 and 1, not {share:g}")
    try:
        wanted = tuple(dict.fromkeys(check_label(label.strip()) for label in labels))
    except ValueError as exc:
        raise SimInputError(str(exc)) from None
    rng = random.Random(seed)
    chosen: dict[str, bool] = {}
    jobs = []
    for job in workload.jobs:
        key = job.group or f"#{job.id}"
        if key not in chosen:
            chosen[key] = share >= 1.0 or rng.random() < share
        if chosen[key]:
            job = replace(job, constraints=tuple(dict.fromkeys((*job.constraints, *wanted))))
        jobs.append(job)
    params = {**workload.params, "constraint": ",".join(wanted), "constrained": f"{share:g}"}
    return replace(workload, jobs=tuple(jobs), params=params)
