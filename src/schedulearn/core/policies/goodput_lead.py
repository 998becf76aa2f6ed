"""`goodput`'s `lead` rule: jobs of one model and unknown length finish one by one.

Without a declared or learned length, `goodput` expects a job to need as
much again as it has made (least attained service). Among jobs of one
model that weighs the youngest most and the oldest least, and past the
ceiling all alike: several long jobs of one model (Pollux's imagenet
jobs, days on one GPU) then share the GPUs evenly and all finish late,
the oldest after hours of runs at a few GPUs, squeezed by each newcomer.
But jobs of one model (and one initial batch) usually train alike: the
one that has made the most progress is the one nearest its end. With
`lead`, once a model's leader (its job of unknown length with the most
progress) has made `lead` seconds' worth of progress on one GPU, every
job of that model is expected to need the leader's least-attained-service
estimate plus the progress it trails the leader by: the leader is
weighed as before, the others behind it in order of progress, so they
finish one after another (shortest remaining first among jobs that
train alike) instead of together. Across models nothing changes.

What it reads is in the pass's snapshot: each job's submitted model name
and the progress live jobs report (`JobGoodput.progress`), never a
length; jobs that name no model, or whose remaining work is known
(declared or learned), are left as they are. Pure: a function of the
snapshot alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from schedulearn.core.goodput import JobGoodput
from schedulearn.core.views import JobView

Group = tuple[str, int]  # (model name, initial batch): jobs whose progress compares


def group_of(job: JobView, info: JobGoodput) -> Group | None:
    """The jobs a job is ranked among: its model and initial batch (None: no model).

    Progress is counted in steps at the initial batch, so jobs of one model
    but different initial batches do not compare."""
    return (job.model, info.limits.init_batch) if job.model else None


def leaders(jobs: Iterable[JobView], reports: Mapping[int, JobGoodput]) -> dict[Group, float]:
    """Per group, the most progress made by one of its jobs of unknown length."""
    out: dict[Group, float] = {}
    for job in jobs:
        info = reports.get(job.id)
        if info is None or info.remaining is not None:
            continue
        key = group_of(job, info)
        if key is not None and info.progress > out.get(key, -1.0):
            out[key] = info.progress
    return out


def trailing_work(lead: float, progress: float, unit: float, floor: float, ceiling: float) -> float:
    """The work a job of unknown length is expected to need under `lead`.

    `lead` is its group's most progress, `progress` its own, `unit` its
    progress per second on one GPU; the leader's least-attained-service
    estimate (its progress, between `floor` and `ceiling` seconds on one GPU;
    ceiling 0: none) plus the progress the job trails it by."""
    top = max(lead, unit * floor, 1e-9)
    if ceiling > 0:
        top = min(top, max(unit * ceiling, 1e-9))
    return top + max(lead - progress, 0.0)
