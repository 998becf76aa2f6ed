"""Tiresias's waiting queues kept across passes give what ranking every job anew gives.

`WaitingQueues` (core/policies/tiresias_waiting.py) is a cache: over a
seeded stream of snapshots that change as a simulator's do (jobs leave,
arrive, come back preempted with more service, the clock moves on and
sometimes back, a host rebuilds every view), its queues and its next
starvation instant must equal `Tiresias`'s direct ranking at every step.
"""

from __future__ import annotations

import math
import random

import pytest

from schedulearn.core.policies.tiresias import Tiresias
from schedulearn.core.policies.tiresias_waiting import WaitingQueues, _first_starving
from schedulearn.core.views import ClusterView, JobView, NodeView, rebuild

NODES = (NodeView.new("n0", 8),)


def _direct(policy: Tiresias, view: ClusterView) -> tuple[list[list[int]], float]:
    """The queues and steady_until of `policy` ranking every job itself."""
    kept = policy._waiting
    policy._waiting = None
    try:
        queues = [[j.id for j in q] for q in policy._queues(view)]
        return queues, policy.steady_until(view)
    finally:
        policy._waiting = kept


def _job(rng: random.Random, job_id: int, now: float) -> JobView:
    ran = rng.random() < 0.6
    service = rng.choice([0.0, 30.0, 600.0, 7200.0, 1e5]) if ran else 0.0
    gpus = rng.choice([1, 2, 4, 8])
    return JobView(
        job_id,
        float(rng.randrange(0, int(now) + 1)),
        gpus,
        user=f"u{job_id % 3}",
        queued_at=now - rng.choice([0.0, 10.0, 5000.0, 3e5]) if ran else None,
        service_seconds=service,
        attained_gpu_seconds=service * gpus,
        preemptible=True,
    )


@pytest.mark.parametrize("seed", range(12))
def test_kept_queues_equal_a_fresh_ranking(seed: int) -> None:
    rng = random.Random(seed)
    queues = rng.choice([2, 3])
    policy = Tiresias(queues=queues, threshold="3600,57600" if queues == 3 else 3600.0)
    assert policy._waiting is not None
    now, next_id = 1e5, 0
    pending: list[JobView] = []
    for step in range(300):
        roll = rng.random()
        if roll < 0.05:
            pending = [rebuild(j) for j in pending]  # a host that rebuilds every view
        elif roll < 0.08:
            now -= rng.choice([1.0, 500.0])  # the clock goes back
        else:
            now += rng.choice([0.0, 0.0, 60.0, 3600.0, 40000.0])
        for _ in range(rng.randrange(0, 4)):  # some start (leave the queue)
            if pending:
                pending.pop(rng.randrange(len(pending)))
        for _ in range(rng.randrange(0, 4)):  # arrivals, and preempted jobs back
            next_id += 1
            pending.append(_job(rng, next_id, now))
        if step % 7 == 0 and pending:  # one comes back with more service
            old = pending.pop(rng.randrange(len(pending)))
            pending.append(
                rebuild(
                    old,
                    queued_at=now,
                    service_seconds=old.service_seconds + 3000.0,
                    attained_gpu_seconds=old.attained_gpu_seconds + 3000.0 * old.gpus,
                )
            )
        rng.shuffle(pending) if rng.random() < 0.1 else None
        view = ClusterView(now, NODES, tuple(pending))
        want = _direct(policy, view)
        got = [[j.id for j in q] for q in policy._queues(view)], policy.steady_until(view)
        assert got == want, f"step {step} at t={now}"


def test_the_starvation_instant_is_exact() -> None:
    rng = random.Random(3)
    for _ in range(2000):
        since = rng.uniform(0, 1e7) if rng.random() < 0.9 else rng.choice([0.1, 1e15])
        limit = rng.choice([10.0, 0.1, 3.3, rng.uniform(0, 1e6)])
        flip = _first_starving(since, limit)
        assert flip is not None
        assert flip - since > limit
        before = __import__("math").nextafter(flip, float("-inf"))
        assert not before - since > limit
    assert _first_starving(float("inf"), 1.0) is None
    assert _first_starving(0.0, float("nan")) is None


def test_it_needs_a_threshold() -> None:
    with pytest.raises(ValueError, match="one threshold"):
        WaitingQueues([], 10.0)


@pytest.mark.parametrize("seed", range(8))
def test_a_part_of_the_followed_snapshot_is_ranked_as_afresh(seed: int) -> None:
    """The fair-share layer asks about parts of the snapshot (one queue's jobs,
    some queues') between whole snapshots: each part, with a few views the
    cache has not seen, ranks as ranking it anew does, and the cache keeps
    following the whole snapshot (it does not follow the part)."""
    rng = random.Random(100 + seed)
    policy = Tiresias(queues=3, threshold="3600,57600")
    waiting = policy._waiting
    assert waiting is not None
    now, next_id = 1e5, 0
    pending: list[JobView] = []
    parts = 0
    for step in range(250):
        now += rng.choice([0.0, 60.0, 3600.0, 40000.0])
        for _ in range(rng.randrange(0, 4)):
            if pending:
                pending.pop(rng.randrange(len(pending)))
        for _ in range(rng.randrange(0, 5)):
            next_id += 1
            pending.append(_job(rng, next_id, now))
        whole = ClusterView(now, NODES, tuple(pending))
        assert [[j.id for j in q] for q in policy._queues(whole)] == _direct(policy, whole)[0]
        followed = waiting._pending
        if rng.random() < 0.3:
            now += rng.choice([60.0, 3e5])  # a part asked later: jobs starved meanwhile
        for _ in range(3):
            share = rng.choice([0.1, 0.3, 0.6])
            part = [j for j in pending if rng.random() < share]
            for _ in range(rng.randrange(0, 3)):  # views it has not seen
                next_id += 1
                part.insert(rng.randrange(len(part) + 1), _job(rng, next_id, now))
            view = ClusterView(now, NODES, tuple(part))
            got = [[j.id for j in q] for q in policy._queues(view)]
            assert got == _direct(policy, view)[0], f"step {step} at t={now}"
            if waiting._pending is followed:
                parts += 1
    assert parts > 300  # the parts were answered without following them


def test_a_new_view_in_a_part_starves_at_its_exact_instant() -> None:
    policy = Tiresias(queues=2, threshold=3600.0)
    waiting = policy._waiting
    assert waiting is not None
    whole = [JobView(i, 0.0, 1, preemptible=True) for i in range(40)]
    # The first snapshot is ranked; the next with the same views builds the queues.
    policy._queues(ClusterView(0.0, NODES, tuple(whole)))
    policy._queues(ClusterView(0.0, NODES, tuple(whole)))
    followed = waiting._pending
    # Ran 600 s on 8 GPUs (queue 1), requeued at t=1000: starves 6000 s later.
    late = JobView(
        99, 10.0, 8, queued_at=1000.0, service_seconds=600.0,
        attained_gpu_seconds=4800.0, preemptible=True,
    )  # fmt: skip
    flip = _first_starving(1000.0, 6000.0)
    assert flip is not None
    for now, starving in ((math.nextafter(flip, 0.0), False), (flip, True)):
        view = ClusterView(now, NODES, (*whole[:5], late))
        got = [[j.id for j in q] for q in policy._queues(view)]
        assert waiting._pending is followed  # answered as a part
        assert got == ([[0, 1, 2, 3, 4, 99], []] if starving else [[0, 1, 2, 3, 4], [99]])
