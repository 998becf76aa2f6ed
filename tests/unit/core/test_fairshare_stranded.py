"""A brief job that can run on borrowed GPUs only may take a queue that is behind
(`fairshare_fill.stranded`, issue 32 item 2).

No guarantee ever holds GPUs for a job larger than its queue's guarantee (or
of a queue guaranteed none). On a cluster whose guarantees are all in use,
such a job waited until queues ahead happened to lend a whole gang's worth
at once: on the first 5,000 Philly jobs under srtf, 16-GPU jobs of about
40 s waited days (slowdowns of thousands), which alone took Jain's index
over the teams' slowdowns far below the plain policy's. Such a job, expected
to end within `min_run`, may now take the GPUs of jobs of a queue behind
that have run `min_run`; it gives them back before a reclaim could take
them. A job that fits its queue's guarantee, or a long one, may not.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_scenario import Scenario, job, node, preempts, starts

from schedulearn.core import Decision, JobView, create
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy

# 8 GPUs, all guaranteed: A 4, B 4. Nobody has used the cluster lately, so
# both queues are behind (`fairshare_fill.mark_ahead`) and keep their
# guarantees against the policy in force.
TENANCY = Tenancy((Queue.of("A", 4), Queue.of("B", 4), Queue.of("C", 0)))
MIN_RUN = 300.0


def both_queues_at_their_guarantees(started_at: float = 0.0) -> Scenario:
    sc = Scenario(node("n", 8))
    for i in range(4):
        long = {"preemptible": True, "estimated_duration": 90_000.0}
        sc.run(job(10 + i, 1, 0.0, queue="A", **long), {"n": [i]}, started_at=started_at)
        sc.run(job(20 + i, 1, 0.0, queue="B", **long), {"n": [4 + i]}, started_at=started_at)
    return sc


def decide(sc: Scenario, waiting: JobView, now: float = 1000.0) -> list[Decision]:
    view = replace(sc.view(now, [waiting]), tenancy=TENANCY)
    return FairShare(create("srtf"), min_run=MIN_RUN).decide(view)


@pytest.mark.parametrize(("gpus", "queue"), [(8, "B"), (2, "C")])
def test_a_brief_job_that_only_borrows_takes_gpus_of_a_queue_behind(gpus: int, queue: str) -> None:
    # B's 8-GPU job (B is guaranteed 4) or C's 2-GPU job (C is guaranteed
    # none) of 40 s: srtf alone would preempt the long jobs for it.
    brief = job(1, gpus, 0.0, queue=queue, preemptible=True, estimated_duration=40.0)
    decisions = decide(both_queues_at_their_guarantees(), brief)
    assert 1 in starts(decisions), decisions
    assert len(preempts(decisions)) == gpus


def test_the_brief_job_takes_only_jobs_that_have_run_min_run() -> None:
    brief = job(1, 8, 0.0, queue="B", preemptible=True, estimated_duration=40.0)
    decisions = decide(both_queues_at_their_guarantees(started_at=900.0), brief)
    assert not preempts(decisions) and not starts(decisions), decisions


@pytest.mark.parametrize(
    ("gpus", "queue", "estimate"),
    [
        (8, "B", 3_000.0),  # only borrows, but is not brief: it could hold them past min_run
        (1, "A", 40.0),  # brief, but fits A's guarantee, which A's own jobs hold
    ],
)
def test_a_job_that_is_not_stranded_still_leaves_a_queue_behind_alone(
    gpus: int, queue: str, estimate: float
) -> None:
    waiting = job(1, gpus, 0.0, queue=queue, preemptible=True, estimated_duration=estimate)
    decisions = decide(both_queues_at_their_guarantees(), waiting)
    other = "B" if queue == "A" else "A"
    victims = {d for d in preempts(decisions) if (d < 20) == (other == "A")}
    assert not victims, decisions
