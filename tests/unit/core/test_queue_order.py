"""Policies own their queue order: `order` is the order `decide` walks.

The Queue page, `show`'s position and "jobs ahead" all read
`core.queue_order`; these tests pin that order to what each policy's
`decide` actually does, for every registered policy.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedulearn.core import (
    ClusterView,
    JobView,
    NodeView,
    Placement,
    QueueOrder,
    Start,
    available,
    create,
    queue_order,
)

NOW = 10_000.0
# Every built-in policy, plus options that change how it ranks or treats the queue.
SPECS = [
    *available(),
    "fifo:backfill=true",
    "srtf:preempt=false",
    "edf:preempt=true",
    "tiresias:queues=3:threshold=50,500:starvation_factor=1",
    "timeslice:quantum=10",
]


def _view(*jobs: JobView, nodes: tuple[NodeView, ...] = (), now: float = NOW) -> ClusterView:
    # `ClusterView.pending` is in arrival order (queue time, then id), as the hosts build it.
    pending = tuple(sorted(jobs, key=lambda j: (j.waiting_since, j.id)))
    return ClusterView(now=now, nodes=nodes, pending=pending, running=())


def _ids(order: QueueOrder) -> list[int]:
    return [j.id for j in order.jobs]


# --- each policy's rule -----------------------------------------------------------


def test_fifo_considers_jobs_in_arrival_order() -> None:
    a, b = JobView(id=1, submitted_at=1, gpus=1), JobView(id=2, submitted_at=2, gpus=1)
    order = queue_order(create("fifo"), _view(a, b))
    assert _ids(order) == [1, 2] and order.exact


def test_srtf_considers_the_shortest_estimate_first_and_unknown_last() -> None:
    long = JobView(id=1, submitted_at=1, gpus=1, estimated_duration=3600)
    unknown = JobView(id=2, submitted_at=2, gpus=1)
    short = JobView(id=3, submitted_at=3, gpus=1, estimated_duration=60)
    order = queue_order(create("srtf"), _view(long, unknown, short))
    assert _ids(order) == [3, 1, 2] and order.exact
    assert "shortest remaining" in order.rule


def test_edf_considers_the_earliest_deadline_first() -> None:
    late = JobView(id=1, submitted_at=1, gpus=1, deadline=5000)
    none = JobView(id=2, submitted_at=2, gpus=1)
    soon = JobView(id=3, submitted_at=3, gpus=1, deadline=2000)
    assert _ids(queue_order(create("edf"), _view(late, none, soon))) == [3, 1, 2]


def test_tiresias_puts_jobs_with_much_attained_service_behind() -> None:
    served = JobView(id=1, submitted_at=1, gpus=1, attained_gpu_seconds=500)
    fresh = JobView(id=2, submitted_at=2, gpus=1)
    order = queue_order(create("tiresias:threshold=100"), _view(served, fresh))
    assert _ids(order) == [2, 1]


def test_timeslice_considers_the_longest_waiting_first() -> None:
    # Job 1 was submitted first but was suspended since: it waits at the back.
    resumed = JobView(id=1, submitted_at=1, gpus=1, queued_at=500, service_seconds=400)
    waiting = JobView(id=2, submitted_at=2, gpus=1)
    assert _ids(queue_order(create("timeslice"), _view(resumed, waiting))) == [2, 1]


@pytest.mark.parametrize("name", ["tetris", "similarity"])
def test_a_policy_without_a_fixed_order_says_so(name: str) -> None:
    a, b = JobView(id=1, submitted_at=1, gpus=1), JobView(id=2, submitted_at=2, gpus=1)
    order = queue_order(create(name), _view(a, b))
    assert not order.exact and order.rule.startswith("no fixed order")
    assert _ids(order) == [1, 2]


# --- policies that do not state an order ------------------------------------------


class _NoOrder:
    name = "no-order"
    tick_seconds = None

    def decide(self, view: ClusterView) -> list[object]:
        return []


def test_a_policy_without_order_is_shown_in_arrival_order_marked_not_exact() -> None:
    a, b = JobView(id=1, submitted_at=1, gpus=1), JobView(id=2, submitted_at=2, gpus=1)
    order = queue_order(_NoOrder(), _view(a, b))
    assert _ids(order) == [1, 2] and not order.exact
    assert "no-order does not state an order" in order.rule


def test_a_policy_whose_order_is_a_plain_list_is_taken_at_its_word() -> None:
    class Reverse(_NoOrder):
        def order(self, view: ClusterView) -> list[JobView]:
            return list(reversed(view.pending))

    a, b = JobView(id=1, submitted_at=1, gpus=1), JobView(id=2, submitted_at=2, gpus=1)
    order = queue_order(Reverse(), _view(a, b))
    assert _ids(order) == [2, 1] and order.exact


def test_jobs_an_order_leaves_out_are_still_listed_after_it() -> None:
    class Partial(_NoOrder):
        def order(self, view: ClusterView) -> QueueOrder:
            return QueueOrder(view.pending[-1:], "last only")

    a, b, c = (JobView(id=i, submitted_at=i, gpus=1) for i in (1, 2, 3))
    order = queue_order(Partial(), _view(a, b, c))
    assert _ids(order) == [3, 1, 2] and not order.exact
    assert order.position(3) == 1 and order.position(2) == 3 and order.position(9) is None


# --- the order shown is the order decide walks ---------------------------------------


@st.composite
def queues(draw: st.DrawFn) -> list[JobView]:
    """Pending one-GPU jobs whose attributes pull the policies' orders apart."""
    jobs = []
    for job_id in draw(st.lists(st.integers(1, 60), min_size=1, max_size=12, unique=True)):
        submitted = draw(st.floats(0, NOW / 2))
        ran = draw(st.sampled_from([0.0, 0.0, 30.0, 400.0, 3000.0]))
        jobs.append(
            JobView(
                id=job_id,
                submitted_at=submitted,
                gpus=1,
                deadline=draw(st.none() | st.floats(NOW - 500, NOW + 5000)),
                estimated_duration=draw(st.none() | st.floats(10, 5000)),
                preemptible=True,
                # A job that ran before re-entered the queue later, with service behind it.
                queued_at=None if not ran else draw(st.floats(submitted, NOW)),
                service_seconds=ran,
                attained_gpu_seconds=ran * draw(st.sampled_from([1, 4])),
                model=draw(st.sampled_from([None, "resnet50", "transformer"])),
            )
        )
    return jobs


def _first_started(spec: str, view: ClusterView) -> int:
    starts = [d for d in create(spec).decide(view) if isinstance(d, Start)]
    assert len(starts) == 1, starts
    return starts[0].job_id


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=queues())
def test_with_one_free_gpu_the_job_started_is_the_first_of_the_order(
    spec: str, jobs: list[JobView]
) -> None:
    # One free GPU: each pass starts exactly one job. Taking the started job
    # out and passing again walks the whole queue; for a policy with an
    # exact order, that walk is its `order`, job by job.
    node = (NodeView.new("n0", 1),)
    pending = list(jobs)
    while pending:
        view = _view(*pending, nodes=node)
        order = queue_order(create(spec), view)
        assert sorted(_ids(order)) == sorted(j.id for j in pending)
        started = _first_started(spec, view)
        if order.exact:
            assert started == order.jobs[0].id
        pending = [j for j in pending if j.id != started]


@pytest.mark.parametrize("spec", SPECS)
def test_every_policy_states_its_order(spec: str) -> None:
    policy = create(spec)
    order = policy.order(_view(JobView(id=1, submitted_at=1, gpus=1)))
    assert isinstance(order, QueueOrder) and order.rule and _ids(order) == [1]


def test_a_busy_cluster_starts_the_first_job_of_the_order_once_room_frees() -> None:
    # Two GPUs, one held by a non-preemptible job: srtf starts its shortest job,
    # not the oldest, in the one free GPU.
    busy = replace(
        NodeView.new("n0", 2),
        gpus=(NodeView.new("n0", 2).gpus[0], replace(NodeView.new("n0", 2).gpus[1], job_id=99)),
    )
    runner = JobView(
        id=99, submitted_at=0, gpus=1, placement=Placement.of({"n0": [1]}), started_at=0
    )
    old = JobView(id=1, submitted_at=1, gpus=1, estimated_duration=900)
    new = JobView(id=2, submitted_at=2, gpus=1, estimated_duration=60)
    view = ClusterView(now=NOW, nodes=(busy,), pending=(old, new), running=(runner,))
    order = queue_order(create("srtf"), view)
    assert _ids(order) == [2, 1]
    assert [d.job_id for d in create("srtf").decide(view)] == [2]
