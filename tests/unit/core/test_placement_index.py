"""FreePool's indexes (free counts, their tally, per-type counts, scan hints) choose
exactly what a plain scan of every node chooses, through any sequence of takes and
releases in one pass.

The pool finds nodes by free count instead of reading every node (issue 36:
a pass over 1,000 nodes). The references here are the rules written as
scans over the nodes, as `FreePool` implemented them before: best fit,
first fit after a node (wrapping), and a gang that finishes on the
tightest node that holds the remainder and otherwise takes the emptiest
node whole (first in cluster order among equals).
"""

from __future__ import annotations

from dataclasses import replace

from core_scenario import job
from hypothesis import given, settings
from hypothesis import strategies as st

from schedulearn.core import ClusterView, FreePool, GpuView, JobView, NodeView, Placement
from schedulearn.core.capabilities import NodeCapabilities


def _fits_rest(pool: FreePool, node: NodeView, cpus: float, mem: float) -> bool:
    if cpus and pool.free_cpus(node) + 1e-9 < cpus:
        return False
    return not (mem and pool.free_memory_gb(node) + 1e-9 < mem)


def ref_best_fit(pool: FreePool, want: JobView, n: int) -> Placement | None:
    fitting = [node for node in pool.nodes if pool.fits(node, want, n)]
    if not fitting:
        return None
    least = min(pool.num_free(node) for node in fitting)
    chosen = next(node for node in fitting if pool.num_free(node) == least)
    return pool.on_node(chosen, n)


def ref_first_fit(pool: FreePool, want: JobView, n: int, after: str | None) -> Placement | None:
    order = pool.nodes
    if after is not None:
        i = [node.name for node in order].index(after) + 1
        order = order[i:] + order[:i]
    for node in order:
        if pool.fits(node, want, n):
            return pool.on_node(node, n)
    return None


def ref_gang(pool: FreePool, want: JobView, n: int) -> Placement | None:
    usable = [
        node
        for node in pool.nodes
        if node.healthy
        and pool.num_free(node) > 0
        and not (want.gpu_type and node.gpu_type != want.gpu_type)
        and pool.runnable(want, node)
    ]
    if sum(pool.num_free(node) for node in usable) < n:
        return None
    usable.sort(key=lambda node: -pool.num_free(node))
    parts: dict[str, list[int]] = {}
    left = n
    while left:
        tail = [m for m in usable if pool.num_free(m) >= left]
        chosen = min(tail, key=pool.num_free) if tail else usable[0]
        take = min(left, pool.num_free(chosen))
        parts[chosen.name] = list(pool.free_gpus(chosen)[:take])
        usable.remove(chosen)
        left -= take
    placement = Placement.of(parts)
    by_name = {node.name: node for node in pool.nodes}
    for name, held in placement:
        cpus, mem = want.demand_on(placement, len(held), by_name[name].cpus)
        if not _fits_rest(pool, by_name[name], cpus, mem):
            return None
    return placement


node_shapes = st.lists(
    st.tuples(
        st.integers(0, 8),  # GPUs
        st.sets(st.integers(0, 7)),  # busy indices
        st.sampled_from(["", "k80", "v100"]),
        st.sampled_from([0.0, 8.0]),  # CPUs (0: none tracked)
        st.booleans(),  # healthy
        st.booleans(),  # labelled "ib"
    ),
    min_size=1,
    max_size=14,
)
# (what, GPUs, CPUs, GPU type, label, a number for "after" and "release")
steps = st.lists(
    st.tuples(
        st.sampled_from(["best", "first", "gang", "pack", "release"]),
        st.sampled_from([0, 1, 1, 1, 2, 2, 3, 4, 6, 8, 9, 12]),
        st.sampled_from([0.0, 4.0]),
        st.sampled_from([None, "k80", "v100"]),
        st.booleans(),
        st.integers(0, 20),
    ),
    min_size=1,
    max_size=25,
)


def _nodes(shapes: list[tuple[int, set[int], str, float, bool, bool]]) -> tuple[NodeView, ...]:
    out = []
    for i, (gpus, held, gpu_type, cpus, healthy, ib) in enumerate(shapes):
        views = tuple(GpuView(g, gpu_type, job_id=99 if g in held else None) for g in range(gpus))
        node = NodeView(f"n{i}", views, cpus, 0.0, cpus, 0.0, healthy)
        if ib:
            node = replace(node, capabilities=NodeCapabilities(labels=frozenset({"ib"})))
        out.append(node)
    return tuple(out)


@settings(max_examples=400, deadline=None)
@given(shapes=node_shapes, plan=steps, given_counts=st.booleans())
def test_every_choice_matches_a_scan_of_every_node(
    shapes: list[tuple[int, set[int], str, float, bool, bool]],
    plan: list[tuple[str, int, float, str | None, bool, int]],
    given_counts: bool,
) -> None:
    nodes = _nodes(shapes)
    # The simulator hands the pool its free counts; the live server does not.
    counts = tuple(n.num_free_gpus for n in nodes) if given_counts else None
    pool = FreePool(ClusterView(0.0, nodes, (), (), counts))
    held: list[tuple[JobView, Placement]] = []
    for k, (what, gpus, cpus, gpu_type, ib, pick) in enumerate(plan):
        want = job(1000 + k, gpus=gpus, cpus=cpus, gpu_type=gpu_type)
        if ib:
            want = replace(want, constraints=("ib",))
        if what == "release":
            if held:
                gone, placement = held.pop(pick % len(held))
                pool.release(gone, placement)
            continue
        if what == "best":
            got, expected = pool.best_fit(want), ref_best_fit(pool, want, gpus)
        elif what == "first":
            after = nodes[pick % len(nodes)].name if pick % 3 else None
            got, expected = (
                pool.first_fit(want, after=after),
                ref_first_fit(pool, want, gpus, after),
            )
        elif what == "gang":
            got, expected = pool.gang(want), ref_gang(pool, want, gpus)
        else:
            got = pool.pack(want)
            expected = ref_best_fit(pool, want, gpus) or (
                ref_gang(pool, want, gpus) if gpus > 1 else None
            )
        assert got == expected, (what, want)
        if got is not None and got.num_gpus:
            pool.take(want, got)
            held.append((want, got))
    # The counts kept agree with the nodes' own at the end too.
    assert pool.total_free() == sum(pool.num_free(n) for n in nodes)


def test_a_node_that_comes_down_to_a_count_is_found_before_one_seen_earlier() -> None:
    """best_fit remembers where the first node of each free count was; a take (or
    release) that gives an earlier node that count must move the mark back."""
    a = NodeView.new("a", 2)
    b = NodeView.new("b", 1)
    pool = FreePool((a, b))
    assert pool.best_fit(job(1, gpus=1)) == Placement.single("b", [0])
    pool.take(job(1, gpus=1), Placement.single("b", [0]))
    pool.take(job(2, gpus=1), Placement.single("a", [0]))  # a now has 1 free
    assert pool.best_fit(job(3, gpus=1)) == Placement.single("a", [1])


def test_a_typed_search_finds_a_node_of_its_type_that_came_down_to_a_count() -> None:
    """The same for a search on one GPU type's nodes (a job naming the type, or
    `gpu_type=`), which keeps its marks by position among that type's nodes."""
    k80 = NodeView.new("k", 4, gpu_type="k80")
    a = NodeView.new("a", 2, gpu_type="v100")
    b = NodeView.new("b", 1, gpu_type="v100")
    pool = FreePool((k80, a, b))
    one = job(1, gpus=1, gpu_type="v100")
    assert pool.best_fit(one) == Placement.single("b", [0])
    pool.take(one, Placement.single("b", [0]))
    pool.take(job(2, gpus=1), Placement.single("a", [0]))  # a now has 1 free
    assert pool.best_fit(job(3, gpus=1, gpu_type="v100")) == Placement.single("a", [1])
    assert pool.best_fit(job(4, gpus=1), gpu_type="v100") == Placement.single("a", [1])
