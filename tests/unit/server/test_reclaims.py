"""The history line of a job the fair-share layer stops for another queue
(`server.services.reclaims`): it names the queue and the job that got the
GPUs, and says a non-preemptible job starts again from the beginning."""

from __future__ import annotations

from schedulearn.core import JobView, Preempt, Start
from schedulearn.core.decisions import Decision
from schedulearn.core.views import Placement
from schedulearn.server.services.reclaims import notes


def running(job_id: int, gpus: list[int], queue: str = "", preemptible: bool = False) -> JobView:
    placement = Placement.single("n1", gpus)
    return JobView(
        id=job_id,
        submitted_at=0.0,
        gpus=len(gpus),
        queue=queue,
        preemptible=preemptible,
        placement=placement,
        started_at=1.0,
    )


def test_the_line_names_the_queue_and_the_job_that_took_the_gpus() -> None:
    jobs = {
        1: running(1, [0]),
        2: running(2, [1, 2], queue="research", preemptible=True),
        3: running(3, [3]),
        10: JobView(id=10, submitted_at=5.0, gpus=3, queue="team-a"),
        11: JobView(id=11, submitted_at=5.0, gpus=1, queue="team-b"),
    }
    decisions: list[Decision] = [
        Preempt(1, reclaimed_by="team-a"),
        Preempt(2, reclaimed_by="team-a"),
        Preempt(3),  # not a reclaim: the generic line stays
        Start(10, Placement.single("n1", [0, 1, 2])),
        Start(11, Placement.single("n1", [3])),
    ]
    lines = notes(decisions, jobs)
    assert lines == {
        1: "requeued: team-a took back 1 GPU default had borrowed, for job 10; "
        "not preemptible, so it starts again from the beginning",
        2: "preempted: team-a took back 2 GPUs research had borrowed, for job 10",
    }


def test_without_a_start_on_its_gpus_the_line_names_the_queue_only() -> None:
    jobs = {1: running(1, [0], queue="x", preemptible=True)}
    assert notes([Preempt(1, reclaimed_by="team-a")], jobs) == {
        1: "preempted: team-a took back 1 GPU x had borrowed"
    }
