"""What the fair-share book follows from tuple to tuple (issue 32 item 3: kept
up to date, not rebuilt each pass) answers what a fresh count answers: the
GPUs each queue's running jobs hold (`ShareBook`, `held_by_queue`), and the
brief waiting jobs by queue and size (`Backlog.brief`, `brief_waiting`) from
which a turn learns whether a stranded or brief job waits."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from test_fairshare_backlog import churn

from schedulearn.core.fairshare_backlog import Backlog
from schedulearn.core.fairshare_book import ShareBook, brief_waiting
from schedulearn.core.fairshare_queues import (
    DEFAULT_QUEUE,
    Queue,
    QueueShare,
    Tenancy,
    named,
    sweep,
)
from schedulearn.core.views import ClusterView, JobView, NodeView, Placement, rebuild

MIN_RUN = 300.0
# "X" is declared by no one (a best-effort queue: the book lists it where a
# fresh count does); "" names no queue (the default queue).
QUEUES = ("A", "B", "X", "")
TENANCY = Tenancy((Queue.of("A", 4), Queue.of("B", 2), Queue.of(DEFAULT_QUEUE, 0)))
NODES = tuple(NodeView.new(f"n{i}", 8) for i in range(8))


def pending_job(rng: random.Random, job_id: int) -> JobView:
    estimate = rng.choice((None, 30.0, 299.0, 300.0, 301.0, 5000.0))
    done = rng.choice((0.0, 0.0, 200.0))
    started = rng.random() < 0.05  # a view that says it runs: its answer moves with time
    return JobView(
        job_id,
        float(job_id),
        rng.choice((1, 2, 4, 8)),
        queue=rng.choice(QUEUES),
        estimated_duration=estimate,
        service_seconds=done,
        started_at=50.0 if started else None,
    )


def running_job(rng: random.Random, job_id: int) -> JobView:
    gpus = rng.choice((1, 2, 4, 8))
    return JobView(
        job_id,
        float(job_id),
        gpus,
        queue=rng.choice(QUEUES),
        preemptible=rng.random() < 0.7,
        placement=Placement.of({"n0": list(range(gpus))}),
        started_at=float(job_id),
    )


def fresh_brief(jobs: tuple[JobView, ...]) -> tuple[object, object]:
    brief: dict[tuple[str, int], set[int]] = {}
    timed = set()
    for j in jobs:
        answer = brief_waiting(j, MIN_RUN)
        if answer is None:
            timed.add(id(j))
        elif answer:
            brief.setdefault((j.queue, j.gpus), set()).add(id(j))
    return brief, timed


def kept_brief(backlog: Backlog) -> tuple[object, object]:
    brief = {
        (q, gpus): set(mine) for q, sizes in backlog.brief.items() for gpus, mine in sizes.items()
    }
    return brief, set(backlog.timed)


def test_brief_waiting_is_remaining_at_within_min_run_for_a_job_not_running() -> None:
    for estimate, done, want in ((None, 0.0, False), (300.0, 0.0, True), (301.0, 0.0, False),
                                 (500.0, 200.0, True), (100.0, 200.0, True)):  # fmt: skip
        j = JobView(1, 0.0, 1, estimated_duration=estimate, service_seconds=done)
        assert brief_waiting(j, MIN_RUN) is want
        left = j.remaining_at(1e6)
        assert want == (left is not None and left <= MIN_RUN + 1e-9)
    assert brief_waiting(rebuild(j, started_at=5.0), MIN_RUN) is None


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 40))
def test_the_brief_jobs_followed_are_those_of_each_tuple(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    next_id = 0
    jobs: list[JobView] = []
    backlog = Backlog(lambda j: brief_waiting(j, MIN_RUN))
    for _ in range(steps):
        next_id = churn(rng, jobs, next_id, pending_job)
        if rng.random() < 0.1:  # many at once: regrouped
            jobs = [pending_job(rng, next_id + k) for k in range(70)] + jobs
            next_id += 100
        given_jobs = tuple(jobs)
        if jobs and rng.random() < 0.05:
            given_jobs = (*given_jobs, jobs[0])  # one object twice
        backlog.update(given_jobs)
        assert kept_brief(backlog) == fresh_brief(given_jobs)


def counts(shares: dict[str, QueueShare]) -> object:
    # In order: queues no one declared are listed as a fresh count lists them.
    return [(n, s.used, s.pinned, s.beyond, s.pending, s.share) for n, s in shares.items()]


def shares_of(view: ClusterView, book: ShareBook) -> object:
    return counts(book.shares(view, TENANCY)[0])


def fresh_shares(view: ClusterView) -> object:
    return counts(sweep(view, TENANCY)[0])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 40))
def test_the_running_jobs_followed_count_what_a_fresh_count_does(seed: int, steps: int) -> None:
    # Jobs start and end (a resize: a new view of the same job), now and then
    # many at once (counted afresh) or one object twice.
    rng = random.Random(seed)
    next_id = 0
    running: list[JobView] = []
    book = ShareBook(MIN_RUN)
    pending = (JobView(10**6, 0.0, 1, queue="B"),)
    for _ in range(steps):
        for _ in range(rng.randrange(0, 4)):
            if running:
                del running[rng.randrange(len(running))]
        for _ in range(rng.randrange(0, 4)):
            running.append(running_job(rng, next_id))
            next_id += 1
        if running and rng.random() < 0.2:
            k = rng.randrange(len(running))
            running[k] = rebuild(running[k], preemptible=not running[k].preemptible)
        if rng.random() < 0.1:
            running = [running_job(rng, next_id + k) for k in range(40)] + running
            next_id += 100
        given_jobs = tuple(running)
        if running and rng.random() < 0.05:
            given_jobs = (*given_jobs, running[0])
        view = ClusterView(1000.0, NODES, pending, given_jobs, tenancy=TENANCY)
        assert shares_of(book.named(view), book) == fresh_shares(named(view))
