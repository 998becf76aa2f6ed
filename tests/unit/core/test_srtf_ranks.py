"""SRTF's waiting jobs kept in rank order across passes give what sorting every job gives.

`RankedWaiting` (core/policies/srtf_ranks.py) is a cache: over a seeded
stream of snapshots that change as a simulator's do (jobs leave, arrive,
come back preempted with more service; a host that rebuilds every view
or reorders them; a view with `started_at`, as a live host may hand),
and parts of each snapshot asked between them (as the fair-share layer
asks: one queue's jobs, some queues'), `Srtf.order` must equal sorting
every job by `_rank` at every step.
"""

from __future__ import annotations

import random

import pytest

from schedulearn.core.policies.srtf import Srtf, _rank
from schedulearn.core.policies.srtf_ranks import RankedWaiting
from schedulearn.core.views import ClusterView, JobView, NodeView, rebuild

NODES = (NodeView.new("n0", 8),)


def _direct(view: ClusterView) -> list[int]:
    return [r[-1].id for r in sorted((*_rank(j, view.now), j) for j in view.pending)]


def _job(rng: random.Random, job_id: int, now: float) -> JobView:
    estimate = rng.choice([None, 60.0, 600.0, 600.0, 3600.0, 1e5])
    service = rng.choice([0.0, 0.0, 30.0, 600.0])
    return JobView(
        job_id,
        float(rng.choice([0, 10, 10, int(now)])),
        rng.choice([1, 2, 4, 8]),
        estimated_duration=estimate,
        service_seconds=service,
        time_limit=rng.choice([None, None, 500.0]),
        preemptible=True,
    )


@pytest.mark.parametrize("seed", range(10))
def test_kept_order_equals_a_fresh_sort(seed: int) -> None:
    rng = random.Random(seed)
    policy = Srtf()
    now, next_id = 1000.0, 0
    pending: list[JobView] = []
    parts = 0
    for step in range(300):
        now += rng.choice([0.0, 60.0, 3600.0])
        roll = rng.random()
        if roll < 0.04:
            pending = [rebuild(j) for j in pending]  # a host that rebuilds every view
        elif roll < 0.08:
            rng.shuffle(pending)
        elif roll < 0.1 and pending:  # a view with a start time (a live host)
            at = rng.randrange(len(pending))
            pending[at] = rebuild(pending[at], started_at=now - 50.0)
        for _ in range(rng.randrange(0, 4)):
            if pending:
                pending.pop(rng.randrange(len(pending)))
        for _ in range(rng.randrange(0, 5)):
            next_id += 1
            pending.insert(rng.randrange(len(pending) + 1), _job(rng, next_id, now))
        if step % 5 == 0 and pending:  # one comes back with more service
            at = rng.randrange(len(pending))
            old = pending[at]
            pending[at] = rebuild(old, service_seconds=old.service_seconds + 300.0, started_at=None)
        whole = ClusterView(now, NODES, tuple(pending))
        assert [j.id for j in policy.order(whole).jobs] == _direct(whole), f"step {step}"
        followed = policy._ranked._pending
        for _ in range(2):
            part = [j for j in pending if rng.random() < rng.choice([0.1, 0.5])]
            for _ in range(rng.randrange(0, 3)):
                next_id += 1
                part.insert(rng.randrange(len(part) + 1), _job(rng, next_id, now))
            view = ClusterView(now, NODES, tuple(part))
            assert [j.id for j in policy.order(view).jobs] == _direct(view), f"step {step}"
            if followed is not None and policy._ranked._pending is followed:
                parts += 1
    assert parts > 100  # parts were answered without following them


def test_a_view_twice_or_with_a_start_time_is_left_to_a_direct_sort() -> None:
    cache = RankedWaiting()
    a = JobView(1, 0.0, 1, estimated_duration=100.0)
    b = JobView(2, 0.0, 1, estimated_duration=50.0)
    assert cache.order((a, b)) == [b, a]
    assert cache.order((a, b, a)) is None
    assert cache.order((a, rebuild(b, started_at=5.0))) is None
    c = JobView(3, 0.0, 1)  # no estimate: last
    assert [j.id for j in cache.order((a, b, c)) or ()] == [2, 1, 3]


def test_views_seen_first_are_sorted_into_the_cache_so_the_next_pass_does_not_sort() -> None:
    # The first pass on a backlog sorts its views into the cache (in place of the
    # caller's sort), so a host that keeps its views (the live server's
    # `PendingCache`) sorts a backlog once, not on its first two passes; a host
    # that hands new views every pass gets them sorted each time, as directly.
    policy = Srtf()
    jobs = [JobView(i, float(i), 1, estimated_duration=float(100 - i % 7)) for i in range(80)]
    view = ClusterView(0.0, NODES, ())
    for k in range(3):
        view = ClusterView(float(k), NODES, tuple(rebuild(j) for j in jobs))
        assert [j.id for j in policy.order(view).jobs] == _direct(view)
        assert policy._ranked._built
        assert policy._ranked._pending is view.pending
    again = ClusterView(3.0, NODES, tuple(view.pending))  # the same views again
    kept = policy._ranked._jobs
    assert [j.id for j in policy.order(again).jobs] == _direct(again)
    assert policy._ranked._jobs is kept  # followed (nothing changed), not sorted anew
