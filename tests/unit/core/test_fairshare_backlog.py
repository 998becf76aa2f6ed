"""The fair-share layer's backlog (`Backlog`): followed from tuple to tuple, it
answers exactly what a fresh grouping of each tuple answers."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedulearn.core.fairshare_backlog import Backlog
from schedulearn.core.fairshare_queues import pending_by_queue
from schedulearn.core.views import JobView

QUEUES = ("a", "b", "c", "d")


def fresh(jobs: tuple[JobView, ...]) -> tuple[object, object, object]:
    by_queue = pending_by_queue(jobs)
    return (
        [(q, [id(j) for j in js]) for q, js in by_queue.items()],  # keys in order
        [(q, sum(j.gpus for j in js)) for q, js in by_queue.items()],
        {j.id: id(j) for j in jobs},
    )


def kept(backlog: Backlog) -> tuple[object, object, object]:
    backlog.in_order()
    return (
        [(q, [id(j) for j in js]) for q, js in backlog.by_queue.items()],
        list(backlog.waiting.items()),
        {k: id(j) for k, j in backlog.by_id().items()},
    )


def new_job(rng: random.Random, next_id: int) -> JobView:
    return JobView(next_id, float(next_id), rng.choice((1, 2, 4, 8)), queue=rng.choice(QUEUES))


def churn(
    rng: random.Random,
    jobs: list[JobView],
    next_id: int,
    make: Callable[[random.Random, int], JobView] = new_job,
) -> int:
    """Drop up to 3 jobs anywhere and insert up to 3 new ones (`make`) anywhere
    (a preempted job rejoins at its place); the next unused id."""
    for _ in range(rng.randrange(0, 4)):
        if jobs:
            del jobs[rng.randrange(len(jobs))]
    for _ in range(rng.randrange(0, 4)):
        jobs.insert(rng.randrange(len(jobs) + 1), make(rng, next_id))
        next_id += 1
    return next_id


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 40))
def test_a_followed_backlog_groups_each_tuple_as_a_fresh_grouping(seed: int, steps: int) -> None:
    # A host that keeps its views: each tuple drops some jobs, inserts new
    # ones anywhere (a preempted job rejoins at its place), now and then
    # moves one (a reordering: regrouped) or hands one object twice.
    rng = random.Random(seed)
    next_id = 0
    jobs: list[JobView] = []
    for _ in range(rng.randrange(0, 30)):
        jobs.append(new_job(rng, next_id))
        next_id += 1
    backlog = Backlog()
    for _ in range(steps):
        next_id = churn(rng, jobs, next_id)
        if len(jobs) > 2 and rng.random() < 0.15:
            jobs.insert(rng.randrange(len(jobs)), jobs.pop(rng.randrange(len(jobs))))
        if rng.random() < 0.1 and jobs:  # every 100th step or so: many at once
            jobs = [new_job(rng, next_id + k) for k in range(rng.randrange(70, 90))] + jobs
            next_id += 100
        given_jobs = tuple(jobs)
        if jobs and rng.random() < 0.05:
            given_jobs = (*given_jobs, jobs[0])  # one object twice
        backlog.update(given_jobs)
        assert kept(backlog) == fresh(given_jobs)
        if rng.random() < 0.5:  # indexed between changes, or not
            backlog.by_id()


@pytest.mark.parametrize("where", ["head", "middle", "tail"])
def test_a_job_that_comes_before_its_queues_first_job_moves_the_queue_first(where: str) -> None:
    # The keys' order (each queue's first job) is what the shares are filled in.
    a0 = JobView(0, 0.0, 1, queue="a")
    b0 = JobView(1, 1.0, 1, queue="b")
    a1 = JobView(2, 2.0, 1, queue="a")
    backlog = Backlog()
    backlog.update((a0, b0, a1))
    assert list(backlog.by_queue) == ["a", "b"]
    b2 = JobView(3, 0.5, 2, queue="b")
    jobs = {"head": (b2, b0, a1), "middle": (b2, a0, b0, a1), "tail": (b0, a1, b2)}[where]
    assert backlog.update(jobs) is not None  # followed, not regrouped
    assert kept(backlog) == fresh(jobs)
    assert list(backlog.by_queue) == ["b", "a"]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 40))
def test_the_jobs_of_a_set_of_queues_are_followed_as_a_fresh_selection(
    seed: int, steps: int
) -> None:
    rng = random.Random(seed)
    next_id = 0
    jobs: list[JobView] = []
    backlog = Backlog()
    sets = [frozenset(rng.sample(QUEUES, rng.randrange(1, 4))) for _ in range(10)]
    for _ in range(steps):
        next_id = churn(rng, jobs, next_id)
        given_jobs = tuple(jobs)
        backlog.update(given_jobs)
        for queues in rng.sample(sets, 3):  # more sets than are kept
            got = backlog.select(queues)
            assert [id(j) for j in got] == [id(j) for j in given_jobs if j.queue in queues]
