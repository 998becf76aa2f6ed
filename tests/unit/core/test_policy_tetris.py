"""Tetris: the best-aligned (job, node) pair first, over all pending jobs."""

from __future__ import annotations

from core_scenario import Scenario, job, node, place, started_ids, starts

from schedulearn.core import create


def alignment(demand: tuple[float, ...], cap: tuple[float, ...], free: tuple[float, ...]) -> float:
    """The score as the paper defines it: sum of (demand/cap) * (free/cap)."""
    return sum((d / c) * (f / c) for d, c, f in zip(demand, cap, free, strict=True) if c)


def test_the_node_whose_free_vector_aligns_best_gets_the_task() -> None:
    s = Scenario(node("n0", 4, cpus=16), node("n1", 4, cpus=16))
    s.run(job(90, gpus=3, cpus=0.0), {"n0": [0, 1, 2]})  # n0 free: 1 GPU, 16 CPUs
    s.run(job(91, gpus=0, cpus=15.0), {"n1": []})  # n1 free: 4 GPUs, 1 CPU
    task = job(1, gpus=1, cpus=1.0)
    on_n0 = alignment((1, 1), (4, 16), (1, 16))
    on_n1 = alignment((1, 1), (4, 16), (4, 1))
    assert on_n1 > on_n0  # 0.254 against 0.125: not the GPU best fit (n0)
    assert starts(s.decide(create("tetris"), 0, [task]))[1].nodes == ("n1",)


def test_alignment_packs_what_arrival_order_would_strand() -> None:
    def scenario() -> Scenario:
        s = Scenario(node("n1", 4, cpus=16), node("n0", 4, cpus=16))
        s.run(job(90, gpus=2, cpus=2.0), {"n1": [0, 1]})  # n1 free: 2 GPUs, 14 CPUs
        s.run(job(91, gpus=2, cpus=14.0), {"n0": [0, 1]})  # n0 free: 2 GPUs, 2 CPUs
        return s

    small = job(1, gpus=2, cpus=2.0)
    cpu_heavy = job(2, gpus=2, cpus=12.0)
    # FIFO gives the first job the first node with room and strands the second.
    assert started_ids(scenario().decide(create("fifo"), 0, [small, cpu_heavy])) == [1]
    got = starts(scenario().decide(create("tetris"), 0, [small, cpu_heavy]))
    assert got == {2: place({"n1": [2, 3]}), 1: place({"n0": [2, 3]})}


def test_no_head_of_line_blocking() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    s.run(job(90), {"a": [0]})
    pending = [job(1, gpus=8), job(2, gpus=1)]
    assert started_ids(s.decide(create("tetris"), 0, pending)) == [2]


def test_the_larger_demand_goes_first_on_an_empty_node() -> None:
    s = Scenario(node("a", 4))
    assert started_ids(s.decide(create("tetris"), 0, [job(1, gpus=1), job(2, gpus=4)])) == [2]


def test_ties_go_to_the_earlier_job_and_the_first_node() -> None:
    s = Scenario(node("a", 2), node("b", 2))
    got = starts(s.decide(create("tetris"), 0, [job(1, gpus=2), job(2, gpus=2)]))
    assert got == {1: place({"a": [0, 1]}), 2: place({"b": [0, 1]})}


def test_ties_go_to_the_first_node_with_cpu_and_memory_demands_too() -> None:
    s = Scenario(node("a", 2, cpus=8, memory_gb=16), node("b", 2, cpus=8, memory_gb=16))
    pending = [job(1, gpus=1, cpus=2.0, memory_gb=4.0), job(2, gpus=1, cpus=2.0, memory_gb=4.0)]
    got = starts(s.decide(create("tetris"), 0, pending))
    # Job 1 takes the first of two equal nodes; job 2 then prefers the emptier b.
    assert got == {1: place({"a": [0]}), 2: place({"b": [0]})}


def test_a_task_without_gpus_is_placed_by_cpu_and_memory() -> None:
    s = Scenario(node("a", 2, cpus=8, memory_gb=32), node("b", 2, cpus=8, memory_gb=32))
    s.run(job(90, gpus=0, cpus=6.0, memory_gb=4.0), {"a": []})
    task = job(1, gpus=0, cpus=4.0, memory_gb=8.0)
    assert starts(s.decide(create("tetris"), 0, [task])) == {1: place({"b": []})}


def test_a_gpu_type_constraint_is_respected() -> None:
    s = Scenario(node("a", 8, gpu_type="k80"), node("b", 2, gpu_type="v100"))
    task = job(1, gpus=2, gpu_type="v100")
    assert starts(s.decide(create("tetris"), 0, [task])) == {1: place({"b": [0, 1]})}


def test_a_job_bigger_than_any_node_runs_as_a_gang() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    got = starts(s.decide(create("tetris"), 0, [job(1, gpus=6), job(2, gpus=1)]))
    # Packing goes first (job 2), then the gang fits in what is left.
    assert got[1].num_gpus == 6 and got[1].num_nodes == 2
    assert got[2].num_gpus == 1


def test_nothing_fits_nothing_starts() -> None:
    s = Scenario(node("a", 2, cpus=4))
    assert s.decide(create("tetris"), 0, [job(1, gpus=1, cpus=8.0)]) == []
