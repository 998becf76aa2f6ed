"""Goodput kept across passes decides as a fresh goodput (`policies.goodput_kept`).

The live server keeps one policy object and the waiting jobs' view objects
from pass to pass, so the second pass onward weighs most waiting jobs from
the cache; `test_pass_replay.py` creates a fresh policy per snapshot and
never reaches it. Here one policy object decides pass after pass on
snapshots rebuilt as the server rebuilds them (new node and running views,
the same waiting views), and on snapshots whose cluster changed under the
same waiting views, and each pass must equal a fresh policy's.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from schedulearn.core import ClusterView, JobView, NodeView, Placement, Policy, Start, create
from schedulearn.core.policies.goodput import Goodput, _greedy, _Job
from schedulearn.core.policies.goodput_kept import KeptWeights
from schedulearn.core.policies.goodput_weight import share_first
from schedulearn.sim.snapshots import Shape, scale_view


def _rebuilt(view: ClusterView, now: float, nodes: int | None = None) -> ClusterView:
    """`view` as the server's next pass reads it: new node and running views, the
    same waiting views in a new tuple; optionally only its first `nodes` nodes."""
    kept = view.nodes if nodes is None else view.nodes[:nodes]
    on = {n.name for n in kept}
    running = tuple(
        replace(j) for j in view.running if j.placement and set(j.placement.nodes) <= on
    )
    return ClusterView(now, tuple(replace(n) for n in kept), tuple([*view.pending]), running)


def _decisions(policy: Policy, view: ClusterView) -> list[str]:
    return [repr(d) for d in policy.decide(view)]


@pytest.mark.parametrize(
    "shape",
    [
        Shape(nodes=60, pending=400),
        Shape(nodes=60, pending=400, elastic_share=0.5, free_share=0.3),
        Shape(nodes=40, gpus_per_node=4, pending=300, free_share=0.6),
    ],
)
def test_a_kept_policy_decides_each_pass_as_a_fresh_one(shape: Shape) -> None:
    view = scale_view(shape, 5)
    kept = create("goodput")
    assert isinstance(kept, Goodput)
    for k in range(4):
        # Rebuilt as the server does, or (as a host that keeps every view may hand
        # them) the same job views with the clock far on: running jobs, whose weight
        # moves with the clock, must not be kept.
        later = view.now + 30_000.0 * k
        this = _rebuilt(view, later) if k % 2 else replace(view, now=later)
        assert _decisions(kept, this) == _decisions(create("goodput"), this)
    # The waiting jobs were weighed from the cache (else this test proves nothing).
    assert len(kept._kept._kept) > shape.pending // 2


def test_a_changed_cluster_under_the_same_waiting_views_is_weighed_anew() -> None:
    """Node size and GPU total are part of a waiting job's weighing: a pass on a
    smaller cluster (a gang's counts and the jobs that fit change) must not reuse
    the last pass's."""
    big = scale_view(Shape(nodes=60, pending=400, elastic_share=0.6, free_share=0.5), 8)
    kept = create("goodput")
    assert isinstance(kept, Goodput)
    _decisions(kept, big)
    small = _rebuilt(big, big.now + 1, nodes=3)
    assert _decisions(kept, small) == _decisions(create("goodput"), small)
    # And a changed setting is a new key too.
    kept.restart_cost = 300.0
    again = _rebuilt(big, big.now + 2)
    fresh = create("goodput", restart_cost=300.0)
    assert _decisions(kept, again) == _decisions(fresh, again)


def test_the_cache_answers_only_for_the_same_view_under_the_same_key() -> None:
    job = JobView(id=1, submitted_at=0.0, gpus=2, estimated_duration=100.0)
    kept: KeptWeights[str] = KeptWeights()
    kept.begin(("cluster", 8))
    assert kept.get(job) is None
    kept.put(job, "entry", 0.5)
    kept.end()
    kept.begin(("cluster", 8))
    assert kept.get(replace(job)) is None  # an equal view, not the same one
    assert kept.get(job) == ("entry", 0.5)
    kept.end()
    kept.begin(("cluster", 8))
    assert kept.get(job) == ("entry", 0.5)  # met last pass, so kept
    kept.end()
    kept.begin(("cluster", 4))  # another key: all forgotten
    assert kept.get(job) is None
    kept.end()
    kept.begin(("cluster", 4))
    kept.end()  # a pass that did not meet it drops it
    kept.begin(("cluster", 4))
    assert kept.get(job) is None
    # Only a view that waits and never started is a function of itself.
    assert KeptWeights.keepable(job)
    assert not KeptWeights.keepable(replace(job, started_at=5.0))
    assert not KeptWeights.keepable(replace(job, placement=Placement.single("n0", [0, 1])))


def test_a_queue_that_changed_between_passes_is_weighed_as_a_fresh_policy_weighs_it() -> None:
    """As live: between passes some waiting jobs started (gone from the queue) and
    others arrived (views never seen): the kept ones come from the cache, looked up
    all at once (`KeptWeights.many`), the new ones are weighed, in queue order."""
    view = scale_view(Shape(nodes=60, pending=400, elastic_share=0.3, free_share=0.4), 12)
    newcomers = scale_view(Shape(nodes=60, pending=500, elastic_share=0.3), 13).pending[400:]
    kept = create("goodput")
    assert isinstance(kept, Goodput)
    _decisions(kept, view)
    queue = (*view.pending[50:200], *newcomers[:40], *view.pending[200:], *newcomers[40:])
    later = replace(_rebuilt(view, view.now + 60.0), pending=queue)
    assert _decisions(kept, later) == _decisions(create("goodput"), later)
    # Every waiting job met is kept, those of unknown speed (no estimate) too.
    assert len(kept._kept._kept) == len(queue)
    assert any(j.estimated_duration is None for j in queue)
    # And the next pass finds each of them kept.
    again = _rebuilt(later, later.now + 60.0)
    assert kept._kept.many(again.pending).count(None) == 0
    assert _decisions(kept, again) == _decisions(create("goodput"), again)


def test_a_job_of_unknown_speed_outranks_the_best_weight_kept_waiting_jobs_included() -> None:
    """Jobs of unknown speed are valued above the best weight of the pass: a kept
    waiting job's weight counts as a weighed one's does. Here the short waiting
    jobs outweigh the long running one, so a pass that left their kept weights
    out would value the running job of unknown speed below them and stop it."""
    free = NodeView.new("n", 2)
    node = replace(free, gpus=tuple(replace(g, job_id=g.index + 1) for g in free.gpus))
    unknown = JobView(
        id=1, submitted_at=0.0, gpus=1, preemptible=True,
        placement=Placement.single("n", [0]), started_at=10.0,
    )  # fmt: skip
    long = JobView(
        id=2, submitted_at=0.0, gpus=1, preemptible=True, estimated_duration=2e6,
        placement=Placement.single("n", [1]), started_at=10.0,
    )  # fmt: skip
    short = JobView(id=3, submitted_at=1.0, gpus=1, estimated_duration=30.0)
    also_short = JobView(id=4, submitted_at=3.0, gpus=1, estimated_duration=30.0)
    view = ClusterView(100.0, (node,), (short, also_short), (unknown, long))
    kept = create("goodput")
    first = _decisions(kept, view)
    assert first == _decisions(create("goodput"), view)
    assert [d.split(",")[0] for d in first] == ["Preempt(job_id=2", "Start(job_id=3"]
    again = _rebuilt(view, 160.0)
    assert _decisions(kept, again) == _decisions(create("goodput"), again) == first


def test_a_kept_job_of_unknown_speed_is_valued_anew_from_each_pass_s_best_weight() -> None:
    """A waiting job of unknown speed is kept for its counts, not its values: when a
    newcomer raises the pass's best weight, its value rises with it, and it still
    starts before the newcomer (a stale value would start the newcomer)."""
    node = NodeView.new("n", 1)
    long = JobView(id=1, submitted_at=0.0, gpus=1, estimated_duration=1e4)
    unknown = JobView(id=2, submitted_at=1.0, gpus=1)
    short = JobView(id=3, submitted_at=2.0, gpus=1, estimated_duration=30.0)
    kept = create("goodput")
    start = [repr(Start(2, Placement.single("n", [0])))]
    assert _decisions(kept, ClusterView(100.0, (node,), (long, unknown))) == start
    later = ClusterView(160.0, (replace(node),), (long, unknown, short))
    assert _decisions(kept, later) == _decisions(create("goodput"), later) == start


def test_many_answers_as_get_does_for_each() -> None:
    jobs = [JobView(id=i, submitted_at=0.0, gpus=1, estimated_duration=60.0) for i in range(4)]
    kept: KeptWeights[str] = KeptWeights()
    kept.begin("k")
    kept.put(jobs[0], "a", 1.0)
    kept.put(jobs[2], "c", 3.0)
    kept.end()
    kept.begin("k")
    assert kept.many([jobs[2], replace(jobs[0]), jobs[1], jobs[0]]) == [
        (jobs[2], "c", 3.0),
        None,  # an equal view, not the same one
        None,
        (jobs[0], "a", 1.0),
    ]
    kept.end()
    kept.begin("k")  # what `many` found is kept for the next pass, as with `get`
    assert kept.get(jobs[0]) == ("a", 1.0)
    assert kept.get(jobs[2]) == ("c", 3.0)


def test_with_share_a_kept_policy_decides_each_pass_as_a_fresh_one() -> None:
    # `share` adds its bonus to the values of the pass's waiting jobs: a kept
    # weighing must not carry one pass's bonus into the next.
    view = scale_view(Shape(nodes=60, pending=400, elastic_share=0.5, free_share=0.3), 5)
    kept = create("goodput:share=true")
    for k in range(4):
        this = _rebuilt(view, view.now + 30_000.0 * k)
        assert _decisions(kept, this) == _decisions(create("goodput:share=true"), this)


@pytest.mark.parametrize("spec", ["goodput", "goodput:share=true", "goodput:fairness=1"])
def test_a_kept_rigid_job_s_jump_is_the_one_its_values_give(spec: str) -> None:
    """`_greedy` ranks a kept rigid job by the jump worked out when it was weighed
    (`_Job.jump`), not from its values in each pass: after passes under one policy
    object, every entry's jump is still what its values give, only kept rigid jobs
    of known speed have one, and the greedy gives what it gives without them, at
    budgets down to a few GPUs."""
    view = scale_view(Shape(nodes=60, pending=400, elastic_share=0.3, free_share=0.4), 21)
    policy = create(spec)
    assert isinstance(policy, Goodput)
    for k in range(3):
        this = _rebuilt(view, view.now + 60.0 * k)
        assert _decisions(policy, this) == _decisions(create(spec), this)
    jobs = policy._jobs(this)
    if policy.share:
        share_first(jobs, this.goodput)
    jumped = [j for j in jobs if j.jump is not None]
    if spec == "goodput:share=true":
        assert jumped == []  # nothing is kept: the bonus changes the values each pass
    else:
        assert len(jumped) > 200  # (else this test proves little)
    for j in jobs:
        if j.jump is None:
            continue
        assert len(j.counts) == 1 and not j.unknown
        c = j.counts[0]
        assert j.jump == (-(j.values[c] / c), j.view.id, c)
    fresh = [_Job(j.view, j.counts, j.values, j.unknown) for j in jobs]
    for budget in (this.total_gpus, 100, 7, 1):
        assert _greedy(jobs, budget) == _greedy(fresh, budget)
