"""Who took a preempted job's GPUs back, in words for its history (and `show`, the web page).

Owns the history line of a job the fair-share layer stops for another
queue (`Preempt.reclaimed_by`, set by `core.fairshare`'s reclaim):
"preempted: team-a took back 2 GPUs default had borrowed, for job 17",
or, for a job not marked preemptible (which may borrow idle GPUs beyond
its queue's guarantee, and is requeued when the lender takes them back,
as Kueue does), "requeued: ...; not preemptible, so it starts again from
the beginning". The job that got the GPUs is read from the pass itself:
the start, in the same pass, of a job of the reclaiming queue whose GPUs
overlap the victim's (the core makes room for exactly that start).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from schedulearn.core import Decision, JobView, Preempt, Start
from schedulearn.core.fairshare_queues import DEFAULT_QUEUE
from schedulearn.core.views import Placement


def _gpus(placement: Placement) -> set[tuple[str, int]]:
    return {(node, g) for node, gpus in placement for g in gpus}


def _queue(job: JobView) -> str:
    return job.queue or DEFAULT_QUEUE


def note(victim: JobView, reclaimed_by: str, taker: JobView | None) -> str:
    """The history line of `victim`, stopped for queue `reclaimed_by` (for `taker`)."""
    held = victim.allocated_gpus
    gpus = f"{held} GPU" + ("" if held == 1 else "s")
    line = f"{reclaimed_by} took back {gpus} {_queue(victim)} had borrowed"
    if taker is not None:
        line += f", for job {taker.id}"
    if victim.preemptible:
        return f"preempted: {line}"
    return f"requeued: {line}; not preemptible, so it starts again from the beginning"


def notes(decisions: Sequence[Decision], jobs: Mapping[int, JobView]) -> dict[int, str]:
    """The history line of each job a pass preempts for another queue (job id -> line)."""
    starts = [
        (_gpus(d.placement), jobs[d.job_id])
        for d in decisions
        if isinstance(d, Start) and d.job_id in jobs
    ]
    out: dict[int, str] = {}
    for d in decisions:
        if not isinstance(d, Preempt) or d.reclaimed_by is None:
            continue
        victim = jobs.get(d.job_id)
        if victim is None or victim.placement is None:
            continue
        held = _gpus(victim.placement)
        takers = [
            (len(held & gpus), job)
            for gpus, job in starts
            if _queue(job) == d.reclaimed_by and held & gpus
        ]
        taker = max(takers, key=lambda t: (t[0], -t[1].id))[1] if takers else None
        out[d.job_id] = note(victim, d.reclaimed_by, taker)
    return out
