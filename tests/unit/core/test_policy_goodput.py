"""Goodput policy: short jobs first, growth where it pays, restarts weighed, every rule kept."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from core_scenario import Scenario, job, node, place, preempts, resizes, starts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from snapshots import elastic_job, fill, replay

from schedulearn.core import ClusterView, Decision, JobView, NodeView, create
from schedulearn.core.goodput import BatchLimits, JobGoodput, StepSample, ThroughputParams

LIMITS = BatchLimits(init_batch=128, max_batch=4096, min_local=32, max_local=512)
# A job that scales well: compute 0.1 s at 128 per GPU, a cheap all-reduce.
PARAMS = ThroughputParams(0.05, 0.05 / 128, 0.002, 0.0, 0.004, 0.0)


def sample(nodes: int, replicas: int, atomic: int = 128) -> StepSample:
    compute = PARAMS.compute_time(atomic)
    net = PARAMS.network_time(nodes, replicas)
    return StepSample(nodes, replicas, atomic, compute + net, net)


def adaptive(job_id: int, gpus: int = 1, most: int = 16, **fields: Any) -> JobView:
    return job(job_id, gpus=gpus, min_gpus=1, max_gpus=most, preemptible=True, **fields)


def report(remaining: float, *replicas: int, restarts: int = 0) -> JobGoodput:
    samples = tuple(sample(1 if r <= 4 else -(-r // 4), r) for r in replicas)
    return JobGoodput(LIMITS, samples, 1.0, 4.0, remaining, restarts)


def decide(
    s: Scenario, now: float, pending: list[JobView], reports: dict[int, JobGoodput], **opts: float
) -> list[Decision]:
    policy = create("goodput" + "".join(f":{k}={v}" for k, v in opts.items()))
    view = replace(s.view(now, pending), goodput=reports)
    decisions = policy.decide(view)
    jobs = {j.id: j for j in [*pending, *s.running]}
    s.ledger.apply(decisions, jobs)
    return decisions


def test_the_shorter_job_gets_the_only_gpu() -> None:
    s = Scenario(node("a", 1))
    got = decide(s, 0, [adaptive(1), adaptive(2)], {1: report(50_000, 1), 2: report(500, 1)})
    assert set(starts(got)) == {2}


def test_a_job_never_measured_starts_first_on_one_gpu() -> None:
    s = Scenario(node("a", 1))
    got = decide(s, 0, [adaptive(1), adaptive(2)], {1: report(500, 1), 2: report(500)})
    assert starts(got) == {2: place({"a": [0]})}


def test_a_measured_job_grows_up_to_explore_times_what_it_was_measured_on() -> None:
    s = Scenario(node("a", 4), node("b", 4), node("c", 4))
    s.run(adaptive(1), {"a": [0, 1]}, started_at=0.0)
    got = resizes(decide(s, 100, [], {1: report(1e6, 1, 2)}, explore=2))
    assert list(got) == [1] and got[1].num_gpus == 4
    # By default (explore=4) up to 8; measured up to 8, it takes all 12.
    s2 = Scenario(node("a", 4), node("b", 4), node("c", 4))
    s2.run(adaptive(1), {"a": [0, 1]}, started_at=0.0)
    assert resizes(decide(s2, 100, [], {1: report(1e6, 1, 2)}))[1].num_gpus == 8
    s3 = Scenario(node("a", 4), node("b", 4), node("c", 4))
    s3.run(adaptive(1), {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3]}, started_at=0.0)
    got = resizes(decide(s3, 100, [], {1: report(1e6, 1, 2, 4, 8)}))
    assert got[1].num_gpus == 12


def test_no_resize_when_the_gain_does_not_cover_the_restart() -> None:
    s = Scenario(node("a", 4))
    s.run(adaptive(1), {"a": [0, 1]}, started_at=0.0)
    # About 0.1 s per step at 2 GPUs with 300 steps left: 15 s to go, a restart costs 30 s.
    assert decide(s, 100, [], {1: report(300, 1, 2)}) == []
    # With hours left, the same job grows.
    assert resizes(decide(s, 100, [], {1: report(1e6, 1, 2)}))


def test_a_newcomer_takes_gpus_from_a_long_job() -> None:
    s = Scenario(node("a", 4))
    s.run(adaptive(1, most=4), {"a": [0, 1, 2, 3]}, started_at=0.0)
    got = decide(s, 100, [adaptive(2)], {1: report(1e6, 1, 2, 4), 2: report(100)})
    assert 2 in starts(got)
    assert resizes(got)[1].num_gpus == 3 or 1 in preempts(got)


def test_without_reports_jobs_share_by_a_linear_prior() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    pending = [
        adaptive(1, most=8, estimated_duration=100.0),
        adaptive(2, most=8, estimated_duration=10_000.0),
        job(3, gpus=2, preemptible=True),
    ]
    got = starts(create("goodput").decide(s.view(0, pending)))
    assert set(got) == {1, 2, 3}
    assert got[1].num_gpus > got[2].num_gpus
    assert got[3].num_gpus == 2


def test_options_are_checked() -> None:
    for bad in (
        "fairness=2",
        "restart_cost=-1",
        "explore=0.5",
        "spread=2",
        "spread=-1.5",
        "lead=-1",
    ):
        with pytest.raises(ValueError):
            create(f"goodput:{bad}")


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterView:
    nodes = tuple(
        NodeView.new(
            f"n{i}",
            draw(st.integers(0, 8)),
            gpu_type=draw(st.sampled_from(["", "k80"])),
            cpus=draw(st.sampled_from([0.0, 16.0])),
        )
        for i in range(draw(st.integers(1, 5)))
    )
    fields: dict[str, st.SearchStrategy[object]] = {
        "cpus": st.sampled_from([0.0, 2.0, 12.0]),
        "gpu_type": st.sampled_from([None, None, "k80"]),
        "estimated_duration": st.one_of(st.none(), st.floats(1, 5000)),
        "preemptible": st.booleans(),
    }

    def a_job(job_id: int) -> JobView:
        return elastic_job(draw, job_id, most_gpus=8, widest=40, fields=fields)

    snapshot = fill(draw, nodes, a_job, running=6, pending=(0, 8))
    reports: dict[int, JobGoodput] = {}
    for j in [*snapshot.running, *snapshot.pending]:
        if draw(st.booleans()):
            measured = draw(st.lists(st.integers(1, 16), max_size=3))
            remaining = draw(st.one_of(st.none(), st.floats(0, 1e6)))
            reports[j.id] = report(remaining if remaining is not None else 0.0, *measured)
            if remaining is None:
                reports[j.id] = replace(reports[j.id], remaining=None)
    return snapshot.view(goodput=reports)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    view=snapshots(),
    spec=st.sampled_from(
        ["goodput", "goodput:fairness=1:explore=4", "goodput:share=true", "goodput:spread=-1"]
    ),
)
def test_a_pass_with_reports_is_valid_and_deterministic(view: ClusterView, spec: str) -> None:
    decisions = create(spec).decide(view)
    assert create(spec).decide(view) == decisions
    # The ledger raises on any broken rule: GPU twice, gangs, sizes, types,
    # CPUs, non-preemptible jobs moved, unknown jobs.
    replay(view, decisions)


def test_order_lists_the_queue_as_the_allocation_serves_it() -> None:
    s = Scenario(node("a", 1))
    pending = [adaptive(1), adaptive(2), adaptive(3), job(4, gpus=9)]
    reports = {1: report(50_000, 1), 2: report(500, 1), 3: report(100)}
    view = replace(s.view(0, pending), goodput=reports)
    # Never measured first, then the shortest; a job that cannot run at all last.
    assert [j.id for j in create("goodput").order(view).jobs] == [3, 2, 1, 4]


def test_without_reports_a_running_job_is_not_preempted_for_an_older_one() -> None:
    s = Scenario(node("a", 4))
    s.run(job(5, gpus=2, preemptible=True), {"a": [0, 1]})
    # Job 1 arrived first but needs all 4 GPUs: it waits, nobody is preempted.
    assert decide(s, 10, [job(1, gpus=4, preemptible=True)], {}) == []
    # A job that fits starts on the free GPUs.
    got = decide(s, 10, [job(1, gpus=4, preemptible=True), job(6, gpus=2)], {})
    assert starts(got) == {6: place({"a": [2, 3]})}


def unknown_length(progress: float, *replicas: int) -> JobGoodput:
    """A job that declares no total and has no learned estimate: its progress only."""
    samples = tuple(sample(1, r) for r in replicas)
    return JobGoodput(LIMITS, samples, 1.0, 4.0, None, 0, progress)


def test_of_unknown_length_the_job_that_made_less_progress_goes_first() -> None:
    """Least attained service: with no length known, the younger job gets the GPU
    (one GPU at 0.1 s a step: 3,000 s are 30,000 steps, the floor)."""
    s = Scenario(node("a", 1))
    young, old = unknown_length(40_000, 1), unknown_length(400_000, 1)
    got = decide(s, 0, [adaptive(1), adaptive(2)], {1: old, 2: young})
    assert set(starts(got)) == {2}
    s2 = Scenario(node("a", 1))
    got = decide(s2, 0, [adaptive(1), adaptive(2)], {1: young, 2: old})
    assert set(starts(got)) == {1}


def test_below_the_floor_jobs_of_unknown_length_weigh_alike() -> None:
    """Under `floor` seconds of one-GPU work made, progress does not rank jobs: the
    two split four GPUs evenly; a high floor keeps them even far past it."""
    s = Scenario(node("a", 4))
    got = decide(
        s,
        0,
        [adaptive(1), adaptive(2)],
        {1: unknown_length(10, 1, 2), 2: unknown_length(20_000, 1, 2)},
    )
    assert {j: p.num_gpus for j, p in starts(got).items()} == {1: 2, 2: 2}
    s2 = Scenario(node("a", 4))
    reports = {1: unknown_length(10, 1, 2), 2: unknown_length(200_000, 1, 2)}
    got = decide(s2, 0, [adaptive(1), adaptive(2)], reports)
    assert starts(got)[1].num_gpus > starts(got).get(2, place({"a": []})).num_gpus
    s3 = Scenario(node("a", 4))
    got = decide(s3, 0, [adaptive(1), adaptive(2)], reports, floor=1e6)
    assert {j: p.num_gpus for j, p in starts(got).items()} == {1: 2, 2: 2}


def test_past_the_ceiling_jobs_of_unknown_length_weigh_alike_again() -> None:
    """Two jobs far past `ceiling` seconds of one-GPU work split four GPUs evenly
    (neither is starved for being older); with no ceiling the younger takes more."""
    reports = {1: unknown_length(5e7, 1, 2), 2: unknown_length(1e9, 1, 2)}
    s = Scenario(node("a", 4))
    got = decide(s, 0, [adaptive(1), adaptive(2)], reports)
    assert {j: p.num_gpus for j, p in starts(got).items()} == {1: 2, 2: 2}
    s2 = Scenario(node("a", 4))
    got = decide(s2, 0, [adaptive(1), adaptive(2)], reports, ceiling=0)
    assert starts(got)[1].num_gpus > starts(got).get(2, place({"a": []})).num_gpus


def test_with_share_a_job_of_unknown_length_keeps_a_gpu_while_others_grow() -> None:
    """`share`: a newcomer may take GPUs from an old job of unknown length, but not
    its last one while every job's least count fits; by default the newcomer, far
    more urgent (least attained service), takes all four."""
    reports = {1: unknown_length(400_000, 1, 2), 2: unknown_length(10, 1, 2)}

    def run(**opts: float) -> list[Decision]:
        s = Scenario(node("a", 4))
        s.run(adaptive(1, most=4), {"a": [0, 1]}, started_at=0.0)
        return decide(s, 600, [adaptive(2, most=4)], reports, **opts)

    assert 1 in preempts(run())
    got = run(share=True)
    assert 2 in starts(got) and 1 not in preempts(got)


def test_with_share_a_job_of_known_length_may_still_be_stopped() -> None:
    """Shortest remaining time first keeps its gain: a long job whose remaining work
    is known is not guarded by `share`."""
    s = Scenario(node("a", 4))
    s.run(adaptive(1, most=4), {"a": [0, 1, 2, 3]}, started_at=0.0)
    got = decide(
        s, 600, [adaptive(2, most=4)], {1: report(1e7, 1, 2, 4), 2: report(2e4, 1, 2)}, share=True
    )
    assert 1 in preempts(got) and starts(got)[2].num_gpus == 4


def test_with_spread_an_old_job_of_unknown_length_gets_more_of_the_growth() -> None:
    """`spread`: a job of unknown length gains less from each added GPU the faster it
    already runs (a power mean of speedups, as Pollux weighs them), so GPUs the
    young job would grow on go to the old one; the young one still gets more
    (least attained service). At Pollux's p = -1 they split four GPUs evenly.

    The figures are at fairness 0.5, the default when they were set; at today's
    default, 0.25, the young job's urgency counts more and the old one gets less,
    but `spread` still moves GPUs its way."""
    reports = {1: unknown_length(10, 1, 2), 2: unknown_length(200_000, 1, 2)}

    def split(gpus: int, **opts: float) -> dict[int, int]:
        s = Scenario(node("a", gpus))
        got = decide(s, 0, [adaptive(1), adaptive(2)], reports, **opts)
        return {j: p.num_gpus for j, p in starts(got).items()}

    assert split(8, fairness=0.5) == {1: 6, 2: 2}
    assert split(8, spread=0, fairness=0.5) == {1: 5, 2: 3}
    assert split(4, fairness=0.5) == {1: 3, 2: 1}
    assert split(4, spread=-1, fairness=0.5) == {1: 2, 2: 2}
    assert split(4) == {1: 4}
    assert split(4, spread=-1) == {1: 3, 2: 1}


def test_by_default_remaining_work_weighs_at_fairness_a_quarter() -> None:
    """The default fairness is 0.25 (0.5 until stop 46, chosen on held-out
    workloads): a job's value per GPU scales with `(1 / T(1)) ** 0.75`, so of two
    jobs of known length, 10x apart, the shorter takes more of eight GPUs than it
    did at 0.5 and less than at 0 (shortest remaining time first)."""
    reports = {1: report(20_000, 1, 2), 2: report(200_000, 1, 2)}

    def split(**opts: float) -> dict[int, int]:
        s = Scenario(node("a", 8))
        got = decide(s, 0, [adaptive(1), adaptive(2)], reports, **opts)
        return {j: p.num_gpus for j, p in starts(got).items()}

    assert split() == split(fairness=0.25) == {1: 7, 2: 1}
    assert split(fairness=0.5) == {1: 6, 2: 2}
    assert split(fairness=0) == {1: 8}


def test_spread_leaves_jobs_of_known_length_alone() -> None:
    """Shortest remaining time first gains from concentrating GPUs on the job about
    to finish: `spread` does not touch a job whose remaining work is known."""
    reports = {1: report(20_000, 1, 2), 2: report(400_000, 1, 2)}

    def split(**opts: float) -> dict[int, int]:
        s = Scenario(node("a", 8))
        got = decide(s, 0, [adaptive(1), adaptive(2)], reports, **opts)
        return {j: p.num_gpus for j, p in starts(got).items()}

    assert split(spread=-1) == split()
    assert split()[1] > split().get(2, 0)


def lead_split(
    reports: dict[int, JobGoodput], models: tuple[str, str], **opts: float
) -> dict[int, int]:
    """GPUs each of two waiting adaptive jobs (of the given models) gets on four."""
    s = Scenario(node("a", 4))
    pending = [adaptive(1, model=models[0]), adaptive(2, model=models[1])]
    got = decide(s, 0, pending, reports, **opts)
    return {j: p.num_gpus for j, p in starts(got).items()}


def test_with_lead_jobs_of_one_model_past_the_ceiling_finish_one_by_one() -> None:
    """Past the ceiling, least attained service weighs two jobs of unknown length
    alike and they split the GPUs; with `lead` (the default), of two jobs of one
    model the one further on (nearer its end, if they train alike) goes first."""
    reports = {1: unknown_length(5e7, 1, 2), 2: unknown_length(1e9, 1, 2)}
    same = ("imagenet", "imagenet")
    assert lead_split(reports, same, lead=0) == {1: 2, 2: 2}
    got = lead_split(reports, same)
    assert got[2] > got.get(1, 0)


def test_with_lead_the_leader_goes_first_even_below_the_ceiling() -> None:
    """Once a model's leader has made `lead` seconds' worth of progress on one GPU,
    its model-mates trail it: the inverse of least attained service within a model
    (at 0.1 s a step on one GPU, 1,000 s are 10,000 steps; the leader has 400,000):
    the younger job no longer takes every GPU, the leader gets its share."""
    reports = {1: unknown_length(40_000, 1, 2), 2: unknown_length(400_000, 1, 2)}
    same = ("bert", "bert")
    by_service = lead_split(reports, same, lead=0)
    assert by_service == {1: 4}
    led = lead_split(reports, same, lead=1000)
    assert led.get(2, 0) >= led[1] and led.get(2, 0) > 0
    # Below the threshold nothing changes.
    assert lead_split(reports, same, lead=1e6) == by_service


def test_lead_ranks_only_jobs_of_one_model() -> None:
    """Jobs of different models (or that name none) keep least attained service."""
    reports = {1: unknown_length(40_000, 1, 2), 2: unknown_length(200_000, 1, 2)}
    by_service = lead_split(reports, ("bert", "bert"), lead=0)
    assert lead_split(reports, ("bert", "yolov3"), lead=1000) == by_service
    s = Scenario(node("a", 4))
    got = decide(s, 0, [adaptive(1), adaptive(2)], reports, lead=1000)
    assert {j: p.num_gpus for j, p in starts(got).items()} == by_service


def test_lead_leaves_jobs_of_known_length_alone() -> None:
    """A job whose remaining work is known (declared or learned) is weighed by it,
    and is no model's leader: its progress does not demote the others."""
    known = JobGoodput(LIMITS, (sample(1, 1), sample(1, 2)), 1.0, 4.0, 400_000.0, 0, 1e9)
    reports = {1: unknown_length(40_000, 1, 2), 2: known}
    same = ("bert", "bert")
    assert lead_split(reports, same, lead=1000) == lead_split(reports, same, lead=0)
