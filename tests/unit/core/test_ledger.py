"""GpuLedger: the rules every pass must keep, and atomic passes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_scenario import job, node, place
from hypothesis import given, settings
from hypothesis import strategies as st

from schedulearn.core import GpuLedger, InvalidDecision, JobView, Preempt, Resize, Start
from schedulearn.core.decisions import Decision


def running(j: JobView, parts: dict[str, list[int]]) -> JobView:
    return replace(j, placement=place(parts), started_at=0.0)


def holders(ledger: GpuLedger) -> dict[tuple[str, int], int | None]:
    """Every GPU's holder: the ledger's whole allocation state."""
    out: dict[tuple[str, int], int | None] = {}
    for name in ledger.node_names():
        for g in ledger.node_view(name).gpus:
            out[(name, g.index)] = g.job_id
    return out


def test_a_gpu_is_never_given_twice_in_one_pass() -> None:
    ledger = GpuLedger([node("a", 2)])
    one, two = job(1), job(2)
    with pytest.raises(InvalidDecision, match="held by job 1"):
        ledger.apply([Start(1, place({"a": [0]})), Start(2, place({"a": [0]}))], {1: one, 2: two})
    assert ledger.free_gpus() == 2  # the first start was rolled back too


def test_a_held_gpu_cannot_be_given_in_a_later_pass() -> None:
    ledger = GpuLedger([node("a", 2)])
    ledger.apply([Start(1, place({"a": [0]}))], {1: job(1)})
    with pytest.raises(InvalidDecision, match="held by job 1"):
        ledger.apply([Start(2, place({"a": [0]}))], {2: job(2)})
    assert ledger.holder("a", 0) == 1


def test_a_pass_is_atomic_preemptions_included() -> None:
    ledger = GpuLedger([node("a", 2)])
    victim = running(job(1, preemptible=True), {"a": [0]})
    ledger.apply([Start(1, place({"a": [0]}))], {1: victim})
    before = holders(ledger)
    bad: list[Decision] = [Preempt(1), Start(2, place({"a": [0]})), Start(3, place({"a": [0]}))]
    with pytest.raises(InvalidDecision):
        ledger.apply(bad, {1: victim, 2: job(2), 3: job(3)})
    assert holders(ledger) == before


def test_a_preempted_jobs_gpus_may_go_to_another_job_in_the_same_pass() -> None:
    ledger = GpuLedger([node("a", 1)])
    victim = running(job(1, preemptible=True), {"a": [0]})
    ledger.apply([Start(1, place({"a": [0]}))], {1: victim})
    ledger.apply([Preempt(1), Start(2, place({"a": [0]}))], {1: victim, 2: job(2)})
    assert ledger.holder("a", 0) == 2
    assert ledger.placement_of(1) is None


def test_non_preemptible_jobs_cannot_be_preempted_or_resized() -> None:
    ledger = GpuLedger([node("a", 2)])
    fixed = running(job(1, min_gpus=1, max_gpus=2), {"a": [0]})
    ledger.apply([Start(1, place({"a": [0]}))], {1: fixed})
    with pytest.raises(InvalidDecision, match="not preemptible"):
        ledger.apply([Preempt(1)], {1: fixed})
    with pytest.raises(InvalidDecision, match="not preemptible"):
        ledger.apply([Resize(1, place({"a": [0, 1]}))], {1: fixed})
    assert ledger.placement_of(1) == place({"a": [0]})


def test_sizes_must_match_the_request_or_the_elastic_range() -> None:
    ledger = GpuLedger([node("a", 4)])
    with pytest.raises(InvalidDecision, match="asks for 2 GPUs, not 3"):
        ledger.apply([Start(1, place({"a": [0, 1, 2]}))], {1: job(1, gpus=2)})
    elastic = job(2, gpus=2, min_gpus=1, max_gpus=3, preemptible=True)
    with pytest.raises(InvalidDecision, match=r"asks for 1\.\.3 GPUs, not 4"):
        ledger.apply([Start(2, place({"a": [0, 1, 2, 3]}))], {2: elastic})
    ledger.apply([Start(2, place({"a": [0, 1, 2]}))], {2: elastic})
    grown = replace(elastic, placement=place({"a": [0, 1, 2]}), started_at=0.0)
    ledger.apply([Resize(2, place({"a": [1]}))], {2: grown})
    assert ledger.placement_of(2) == place({"a": [1]})
    assert ledger.free_gpus() == 3


def test_types_health_cpu_and_memory_are_enforced() -> None:
    ledger = GpuLedger(
        [node("k", 2, gpu_type="k80", cpus=4, memory_gb=8), node("v", 2, gpu_type="v100")]
    )
    with pytest.raises(InvalidDecision, match="needs v100 GPUs"):
        ledger.apply([Start(1, place({"k": [0]}))], {1: job(1, gpu_type="v100")})
    with pytest.raises(InvalidDecision, match="needs 6 CPUs"):
        ledger.apply([Start(1, place({"k": [0]}))], {1: job(1, cpus=6.0)})
    with pytest.raises(InvalidDecision, match="16 GB"):
        ledger.apply([Start(1, place({"k": [0]}))], {1: job(1, memory_gb=16.0)})
    ledger.set_health("v", False)
    with pytest.raises(InvalidDecision, match="down"):
        ledger.apply([Start(1, place({"v": [0]}))], {1: job(1)})
    with pytest.raises(InvalidDecision, match="no GPU 7"):
        ledger.apply([Start(1, place({"k": [7]}))], {1: job(1)})


def test_bookkeeping_errors_are_refused() -> None:
    ledger = GpuLedger([node("a", 2)])
    with pytest.raises(InvalidDecision, match="twice"):
        ledger.apply([Start(1, place({"a": [0]})), Preempt(1)], {1: job(1)})
    with pytest.raises(InvalidDecision, match="not in the snapshot"):
        ledger.apply([Start(1, place({"a": [0]}))], {})
    with pytest.raises(InvalidDecision, match="not running"):
        ledger.apply([Preempt(1)], {1: job(1, preemptible=True)})
    ledger.apply([Start(1, place({"a": [0]}))], {1: job(1)})
    with pytest.raises(InvalidDecision, match="already running"):
        ledger.apply([Start(1, place({"a": [1]}))], {1: job(1)})


def test_release_frees_cpu_and_memory_too() -> None:
    ledger = GpuLedger([node("a", 2, cpus=8, memory_gb=16)])
    ledger.apply([Start(1, place({"a": [0, 1]}))], {1: job(1, gpus=2, cpus=8.0, memory_gb=16.0)})
    assert ledger.node_view("a").free_cpus == 0
    assert ledger.release(1) == place({"a": [0, 1]})
    view = ledger.node_view("a")
    assert (view.free_cpus, view.free_memory_gb, view.num_free_gpus) == (8, 16, 2)


# --- property: random passes never give a GPU twice ---------------------------------

NODES = [node("a", 4, cpus=8), node("b", 2, cpus=8), node("c", 4, gpu_type="v100")]
ALL_GPUS = [(n.name, g.index) for n in NODES for g in n.gpus]

decision_specs = st.lists(
    st.tuples(
        st.sampled_from(["start", "preempt", "resize"]),
        st.integers(1, 6),  # job id
        st.lists(st.sampled_from(ALL_GPUS), min_size=1, max_size=5, unique=True),
    ),
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(passes=st.lists(decision_specs, min_size=1, max_size=12), data=st.data())
def test_random_passes_never_give_a_gpu_twice(
    passes: list[list[tuple[str, int, list[tuple[str, int]]]]], data: st.DataObject
) -> None:
    ledger = GpuLedger(NODES)
    specs = {
        i: job(
            i,
            gpus=data.draw(st.integers(1, 4)),
            min_gpus=data.draw(st.sampled_from([None, 1])),
            max_gpus=data.draw(st.sampled_from([None, 5])),
            cpus=data.draw(st.sampled_from([0.0, 2.0])),
            gpu_type=data.draw(st.sampled_from([None, None, "v100"])),
            preemptible=data.draw(st.booleans()),
        )
        for i in range(1, 7)
    }
    for spec in passes:
        decisions: list[Decision] = []
        for kind, job_id, gpus in spec:
            parts: dict[str, list[int]] = {}
            for name, index in gpus:
                parts.setdefault(name, []).append(index)
            placement = place(parts)
            if kind == "start":
                decisions.append(Start(job_id, placement))
            elif kind == "preempt":
                decisions.append(Preempt(job_id))
            else:
                decisions.append(Resize(job_id, placement))
        jobs = {
            i: replace(j, placement=ledger.placement_of(i), started_at=0.0)
            if ledger.placement_of(i)
            else j
            for i, j in specs.items()
        }
        before = holders(ledger)
        try:
            ledger.apply(decisions, jobs)
        except InvalidDecision:
            assert holders(ledger) == before  # a refused pass changes nothing
        # Invariant: each GPU has at most one holder, and the holders agree
        # with the placements the ledger reports.
        state = holders(ledger)
        seen: dict[tuple[str, int], int] = {}
        for i in specs:
            held = ledger.placement_of(i)
            if held is None:
                continue
            assert specs[i].least_gpus <= held.num_gpus <= specs[i].most_gpus
            for name, indices in held:
                for g in indices:
                    assert (name, g) not in seen, (
                        f"GPU {name}:{g} given to {seen[(name, g)]} and {i}"
                    )
                    seen[(name, g)] = i
        assert {k: v for k, v in state.items() if v is not None} == seen
        for name in ledger.node_names():
            view = ledger.node_view(name)
            assert view.free_cpus >= -1e-9
