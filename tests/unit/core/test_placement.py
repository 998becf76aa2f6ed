"""FreePool: first fit, best fit, gangs over the fewest nodes, GPU types, CPU and memory."""

from __future__ import annotations

from dataclasses import replace

from core_scenario import job, node, place
from hypothesis import given, settings
from hypothesis import strategies as st

from schedulearn.core import FreePool, GpuView, NodeView
from schedulearn.core.placement import largest_node_gpus


def busy(n: NodeView, *indices: int, cpus: float = 0.0, memory_gb: float = 0.0) -> NodeView:
    """`n` with GPUs `indices` held by job 99 and some CPU and memory reserved."""
    gpus = tuple(replace(g, job_id=99) if g.index in indices else g for g in n.gpus)
    return replace(n, gpus=gpus, free_cpus=n.cpus - cpus, free_memory_gb=n.memory_gb - memory_gb)


def test_first_fit_takes_the_first_node_in_order_and_can_start_after_one() -> None:
    pool = FreePool((busy(node("a", 4), 0, 1, 2), node("b", 4), node("c", 4)))
    assert pool.first_fit(job(1, gpus=2)) == place({"b": [0, 1]})
    assert pool.first_fit(job(1, gpus=2), after="b") == place({"c": [0, 1]})
    assert pool.first_fit(job(1, gpus=1), after="c") == place({"a": [3]})  # wraps around
    assert pool.first_fit(job(1, gpus=1), after="gone") == place({"a": [3]})


def test_best_fit_leaves_the_fewest_gpus_over_and_breaks_ties_by_order() -> None:
    pool = FreePool(
        (node("a", 4), busy(node("b", 4), 0), busy(node("c", 4), 0, 1), busy(node("d", 4), 2, 3))
    )
    assert pool.best_fit(job(1, gpus=2)) == place({"c": [2, 3]})
    assert pool.best_fit(job(1, gpus=3)) == place({"b": [1, 2, 3]})
    assert pool.best_fit(job(1, gpus=5)) is None


def test_gpus_are_taken_lowest_index_first() -> None:
    pool = FreePool((busy(node("a", 4), 0, 2),))
    assert pool.best_fit(job(1, gpus=2)) == place({"a": [1, 3]})


def test_a_gang_spreads_over_the_fewest_nodes_ending_on_the_tightest() -> None:
    nodes = (busy(node("a", 4), 0, 1), node("b", 4), busy(node("c", 4), 0, 1, 2), node("d", 4))
    pool = FreePool(nodes)
    placement = pool.gang(job(1, gpus=6))
    assert placement is not None
    assert placement.num_nodes == 2
    # The emptiest node whole (b), then the tightest node that holds the rest (a).
    assert placement == place({"b": [0, 1, 2, 3], "a": [2, 3]})


def test_a_gang_needs_all_of_its_gpus_now() -> None:
    pool = FreePool((busy(node("a", 4), 0, 1), busy(node("b", 4), 0)))
    assert pool.gang(job(1, gpus=6)) is None
    assert pool.gang(job(1, gpus=5)) is not None


def test_pack_prefers_one_node_and_falls_back_to_a_gang() -> None:
    pool = FreePool((busy(node("a", 4), 0), node("b", 2), node("c", 2)))
    assert pool.pack(job(1, gpus=3)) == place({"a": [1, 2, 3]})
    gang = pool.pack(job(1, gpus=4))
    assert gang is not None and gang.num_nodes == 2
    assert pool.pack(job(1, gpus=1)) == place({"b": [0]})  # best fit among singles


def test_gpu_types_are_respected_by_every_helper() -> None:
    nodes = (
        node("k", 8, gpu_type="k80"),
        node("v1", 2, gpu_type="v100"),
        node("v2", 2, gpu_type="v100"),
    )
    pool = FreePool(nodes)
    want = job(1, gpus=2, gpu_type="v100")
    assert pool.first_fit(want) == place({"v1": [0, 1]})
    assert pool.best_fit(want) == place({"v1": [0, 1]})
    gang = pool.gang(job(1, gpus=4, gpu_type="v100"))
    assert gang is not None and set(gang.nodes) == {"v1", "v2"}
    assert pool.pack(job(1, gpus=5, gpu_type="v100")) is None
    assert pool.pack(job(1, gpus=5)) == place({"k": [0, 1, 2, 3, 4]})


def test_pack_as_if_the_job_named_a_gpu_type() -> None:
    """`pack(job, gpu_type=...)` places as a copy of the job naming that type would
    be placed (similarity picks the type itself), without the copy."""
    nodes = (
        node("k", 8, gpu_type="k80"),
        busy(node("v1", 4, gpu_type="v100"), 0, 1, 2),
        node("v2", 4, gpu_type="v100"),
        node("v3", 2, gpu_type="v100", cpus=4),
    )
    pool = FreePool(nodes)
    plain = job(1, gpus=3)
    assert pool.pack(plain) == place({"v2": [0, 1, 2]})  # untyped: best fit anywhere
    assert pool.pack(plain, gpu_type="k80") == place({"k": [0, 1, 2]})
    assert pool.pack(job(1, gpus=2), gpu_type="v100") == place({"v3": [0, 1]})
    assert pool.pack(job(1, gpus=1), gpu_type="v100") == place({"v1": [3]})
    # Not GPUs only: only v3 declares CPUs.
    assert pool.pack(job(1, gpus=1, cpus=2.0), gpu_type="v100") == place({"v3": [0]})
    assert pool.pack(job(1, gpus=1, cpus=2.0), gpu_type="k80") is None
    gang = pool.pack(job(1, gpus=7), gpu_type="v100")
    assert gang is not None and set(gang.nodes) <= {"v1", "v2", "v3"}
    assert gang.num_gpus == 7
    assert pool.pack(job(1, gpus=8), gpu_type="v100") is None  # 7 v100s free
    # A job that names a type runs on no other, whatever it is placed as.
    assert pool.pack(job(1, gpus=2, gpu_type="k80"), gpu_type="v100") is None


def test_cpu_and_memory_decide_too() -> None:
    a = busy(node("a", 4, cpus=16, memory_gb=64), cpus=14.0)
    b = busy(node("b", 4, cpus=16, memory_gb=64), 0, memory_gb=60.0)
    c = node("c", 4, cpus=16, memory_gb=64)
    pool = FreePool((a, b, c))
    assert pool.best_fit(job(1, gpus=1, cpus=4.0)) == place({"b": [1]})
    assert pool.best_fit(job(1, gpus=1, cpus=4.0, memory_gb=8.0)) == place({"c": [0]})
    # A gang's CPUs are split in proportion to its GPUs: 8 + 8 of 16.
    gang = FreePool((node("x", 2, cpus=8), node("y", 2, cpus=8))).gang(job(1, gpus=4, cpus=16.0))
    assert gang is not None and gang.num_nodes == 2
    assert (
        FreePool((node("x", 2, cpus=6), node("y", 2, cpus=8))).gang(job(1, gpus=4, cpus=16.0))
        is None
    )


def test_a_node_that_is_down_is_never_chosen() -> None:
    pool = FreePool((replace(node("a", 4), healthy=False), node("b", 1)))
    assert pool.total_free() == 1
    assert pool.pack(job(1, gpus=2)) is None
    assert pool.first_fit(job(1)) == place({"b": [0]})


def test_take_and_release_keep_the_books_for_the_pass() -> None:
    pool = FreePool((node("a", 4, cpus=8), node("b", 4, cpus=8)))
    j = job(1, gpus=3, cpus=6.0)
    first = pool.pack(j)
    assert first == place({"a": [0, 1, 2]})
    pool.take(j, first)
    assert pool.total_free() == 5
    assert pool.free_cpus(pool.nodes[0]) == 2.0
    # The same job again cannot reuse a's GPUs or CPUs.
    assert pool.pack(j) == place({"b": [0, 1, 2]})
    pool.release(j, first)
    assert pool.total_free() == 8
    assert pool.free_gpus(pool.nodes[0]) == [0, 1, 2, 3]
    assert pool.best_fit(job(2, gpus=4)) == place({"a": [0, 1, 2, 3]})


def test_the_pool_never_changes_the_snapshot() -> None:
    nodes = (node("a", 2),)
    pool = FreePool(nodes)
    pool.take(job(1, gpus=2), place({"a": [0, 1]}))
    assert nodes[0].free_gpu_indices == (0, 1)


def test_largest_node() -> None:
    view_nodes = (node("a", 2), node("b", 8), replace(node("c", 16), healthy=False))
    from schedulearn.core import ClusterView

    assert largest_node_gpus(ClusterView(0, view_nodes, ())) == 8


# --- best fit against its definition, on random pools --------------------------------

node_shapes = st.lists(
    st.tuples(
        st.integers(0, 8),  # GPUs
        st.sets(st.integers(0, 7)),  # busy indices
        st.sampled_from(["", "k80", "v100"]),
        st.sampled_from([0.0, 8.0]),  # free CPUs (0: none tracked)
        st.booleans(),  # healthy
    ),
    min_size=1,
    max_size=12,
)


def _nodes(shapes: list[tuple[int, set[int], str, float, bool]]) -> tuple[NodeView, ...]:
    out = []
    for i, (gpus, held, gpu_type, cpus, healthy) in enumerate(shapes):
        views = tuple(GpuView(g, gpu_type, job_id=99 if g in held else None) for g in range(gpus))
        out.append(NodeView(f"n{i}", views, cpus, 0.0, cpus, 0.0, healthy))
    return tuple(out)


@settings(max_examples=300, deadline=None)
@given(
    shapes=node_shapes,
    gpus=st.integers(0, 9),
    cpus=st.sampled_from([0.0, 4.0, 12.0]),
    gpu_type=st.sampled_from([None, "k80", "v100"]),
    taken=st.integers(0, 3),
)
def test_best_fit_is_the_first_fitting_node_with_the_fewest_gpus_left(
    shapes: list[tuple[int, set[int], str, float, bool]],
    gpus: int,
    cpus: float,
    gpu_type: str | None,
    taken: int,
) -> None:
    nodes = _nodes(shapes)
    pool = FreePool(nodes)
    # Hand out a few jobs first, so the pool's own bookkeeping is exercised too.
    for k in range(taken):
        small = job(100 + k, gpus=1)
        placement = pool.first_fit(small)
        if placement is not None:
            pool.take(small, placement)
    want = job(1, gpus=gpus, cpus=cpus, gpu_type=gpu_type)
    fitting = [n for n in nodes if pool.fits(n, want, gpus)]
    got = pool.best_fit(want)
    if not fitting:
        assert got is None
        return
    least = min(pool.num_free(n) for n in fitting)
    expected = next(n for n in fitting if pool.num_free(n) == least)
    assert got == place({expected.name: list(pool.free_gpus(expected))[:gpus]})
