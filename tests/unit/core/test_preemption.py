"""The one preemption helper: `Victims.room_for` suspends the fewest, most preferred jobs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from schedulearn.core import ClusterView, FreePool, JobView, NodeView, Placement, Preempt, Start
from schedulearn.core.preemption import Victims

NOW = 1000.0


def _cluster(
    *running: JobView, sizes: dict[str, int]
) -> tuple[tuple[NodeView, ...], tuple[JobView, ...]]:
    """Nodes of the given sizes with `running` holding their placements' GPUs."""
    holder = {
        (name, g): job.id
        for job in running
        if job.placement is not None
        for name, gpus in job.placement
        for g in gpus
    }
    nodes = []
    for name, size in sizes.items():
        node = NodeView.new(name, size)
        gpus = tuple(replace(g, job_id=holder.get((name, g.index))) for g in node.gpus)
        nodes.append(replace(node, gpus=gpus))
    return tuple(nodes), running


def _running(
    job_id: int, placement: dict[str, list[int]], level: float, preemptible: bool = True
) -> JobView:
    # `deadline` carries the level the tests rank victims by.
    return JobView(
        id=job_id,
        submitted_at=0.0,
        gpus=sum(len(g) for g in placement.values()),
        placement=Placement.of(placement),
        started_at=job_id * 10.0,
        deadline=level,
        preemptible=preemptible,
    )


def _victims(
    view: ClusterView, pool: FreePool, may: Callable[[JobView], bool] | None = None
) -> Victims:
    return Victims(view, pool, lambda j: j.deadline or 0.0, lambda j: j.id, may=may)


def _setup(*running: JobView, sizes: dict[str, int]) -> tuple[ClusterView, FreePool]:
    nodes, jobs = _cluster(*running, sizes=sizes)
    view = ClusterView(now=NOW, nodes=nodes, pending=(), running=jobs)
    return view, FreePool(view)


def test_the_highest_level_is_suspended_first_and_only_as_many_as_needed() -> None:
    low = _running(1, {"a": [0]}, level=10)
    high = _running(2, {"a": [1]}, level=90)
    mid = _running(3, {"a": [2]}, level=50)
    view, pool = _setup(low, high, mid, sizes={"a": 3})
    room = _victims(view, pool).room_for(JobView(id=9, submitted_at=1, gpus=1), free=0)
    assert room is not None
    assert [v.id for v in room.victims] == [2]
    assert room.decisions == (Preempt(2), Start(9, Placement.of({"a": [1]})))
    assert room.free == 0
    # Two GPUs: the two highest, in that order.
    view, pool = _setup(low, high, mid, sizes={"a": 3})
    room = _victims(view, pool).room_for(JobView(id=9, submitted_at=1, gpus=2), free=0)
    assert room is not None and [v.id for v in room.victims] == [2, 3]


def test_only_victims_above_the_bar_are_suspended() -> None:
    low = _running(1, {"a": [0]}, level=10)
    high = _running(2, {"a": [1]}, level=90)
    view, pool = _setup(low, high, sizes={"a": 2})
    victims = _victims(view, pool)
    assert victims.any() and victims.any(above=50) and not victims.any(above=90)
    # Two GPUs are needed but only one job is above 50: no room, and nothing changed.
    assert victims.room_for(JobView(id=9, submitted_at=1, gpus=2), free=0, above=50) is None
    assert pool.total_free() == 0
    # Without a bar both go.
    room = victims.room_for(JobView(id=9, submitted_at=1, gpus=2), free=0)
    assert room is not None and {v.id for v in room.victims} == {1, 2}


def test_a_non_preemptible_job_is_never_suspended() -> None:
    pinned = _running(1, {"a": [0]}, level=99, preemptible=False)
    other = _running(2, {"a": [1]}, level=1)
    view, pool = _setup(pinned, other, sizes={"a": 2})
    victims = _victims(view, pool)
    assert victims.room_for(JobView(id=9, submitted_at=1, gpus=2), free=0) is None
    room = victims.room_for(JobView(id=9, submitted_at=1, gpus=1), free=0)
    assert room is not None and [v.id for v in room.victims] == [2]


def test_may_limits_the_candidates() -> None:
    young = _running(1, {"a": [0]}, level=99)
    old = _running(2, {"a": [1]}, level=1)
    view, pool = _setup(young, old, sizes={"a": 2})
    victims = _victims(view, pool, may=lambda j: j.id != 1)
    room = victims.room_for(JobView(id=9, submitted_at=1, gpus=1), free=0)
    assert room is not None and [v.id for v in room.victims] == [2]


def test_a_gang_victim_frees_every_node_it_holds_and_the_job_may_take_them_all() -> None:
    gang = _running(1, {"a": [0, 1], "b": [0, 1]}, level=90)
    small = _running(2, {"b": [2]}, level=10)
    view, pool = _setup(gang, small, sizes={"a": 2, "b": 3})
    room = _victims(view, pool).room_for(JobView(id=9, submitted_at=1, gpus=4), free=0)
    assert room is not None
    assert [v.id for v in room.victims] == [1]
    # The gang's GPUs on both nodes went to the new job; the small job kept its GPU.
    assert room.placement == Placement.of({"a": [0, 1], "b": [0, 1]})
    assert room.decisions == (Preempt(1), Start(9, room.placement))
    assert pool.total_free() == 0


def test_a_victim_released_early_but_not_needed_keeps_running() -> None:
    # The first choice holds a GPU on node b, the second a whole node a of 2.
    # A 2-GPU job fits on a after both are released, and b's job is kept.
    first = _running(1, {"b": [0]}, level=90)
    second = _running(2, {"a": [0, 1]}, level=50)
    view, pool = _setup(first, second, sizes={"a": 2, "b": 1})
    room = _victims(view, pool).room_for(JobView(id=9, submitted_at=1, gpus=2), free=0)
    assert room is not None
    assert [v.id for v in room.victims] == [2]
    assert room.placement == Placement.of({"a": [0, 1]})
    assert room.decisions == (Preempt(2), Start(9, Placement.of({"a": [0, 1]})))


def test_a_suspended_job_is_no_candidate_for_the_next_waiting_job() -> None:
    only = _running(1, {"a": [0]}, level=90)
    view, pool = _setup(only, sizes={"a": 1})
    victims = _victims(view, pool)
    assert victims.room_for(JobView(id=8, submitted_at=1, gpus=1), free=0) is not None
    assert not victims.any()
    assert victims.room_for(JobView(id=9, submitted_at=1, gpus=1), free=0) is None


def test_free_gpus_count_toward_the_room() -> None:
    # One GPU is free already: a 2-GPU job needs only one victim.
    a = _running(1, {"a": [0]}, level=90)
    b = _running(2, {"a": [1]}, level=80)
    view, pool = _setup(a, b, sizes={"a": 3})
    room = _victims(view, pool).room_for(JobView(id=9, submitted_at=1, gpus=2), free=1)
    assert room is not None and [v.id for v in room.victims] == [1]
    assert room.free == 0


def test_a_job_already_stopping_goes_first_above_every_bar_and_whatever_may_says() -> None:
    # Live, a victim is shown running until its process exits. A pass in
    # between must take it again, not a new victim: here the stopping job is
    # the least preferred, below the bar, and refused by `may`.
    stopping = replace(_running(1, {"a": [0]}, level=1), stopping=True)
    other = _running(2, {"a": [1]}, level=90)
    view, pool = _setup(stopping, other, sizes={"a": 2})
    victims = _victims(view, pool, may=lambda j: j.id != 1)
    room = victims.room_for(JobView(id=9, submitted_at=1, gpus=1), free=0, above=50)
    assert room is not None and [v.id for v in room.victims] == [1]
    # The same from a policy's own ranking (tiresias's).
    view, pool = _setup(stopping, other, sizes={"a": 2})
    ranked = Victims.ranked(view, pool, [other, stopping], [90.0, 1.0])
    room = ranked.room_for(JobView(id=9, submitted_at=1, gpus=1), free=0, above=50)
    assert room is not None and [v.id for v in room.victims] == [1]
