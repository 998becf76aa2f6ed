"""Invariants of the goodput model and policy on whatever jobs report.

Live, `ClusterView.goodput` is built from what training scripts send
(`runtime.AdaptiveBatch`): any limits, step times, gradient statistics
(a negative |G|^2 estimate, zero noise, none yet), a report of a job no
longer in the view. Whatever they say, a pass keeps every rule the
ledger checks, is deterministic, and never gives a job more GPUs than
its batch limits allow or than `explore` times what it was measured on;
and the batch the runtime is told to use is one the limits allow.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from snapshots import elastic_job, fill, replay

from schedulearn.core import (
    ClusterView,
    JobView,
    NodeView,
    Resize,
    Start,
    create,
)
from schedulearn.core.goodput import (
    BatchLimits,
    GoodputModel,
    JobGoodput,
    StepSample,
    fit_throughput,
    noise_ratio,
)

EXPLORE = 4.0


@st.composite
def limits(draw: st.DrawFn) -> BatchLimits:
    init = draw(st.integers(1, 256))
    top = draw(st.integers(init, 4096))
    low = draw(st.integers(1, 64))
    return BatchLimits(init, top, low, draw(st.integers(low, 512)))


@st.composite
def samples(draw: st.DrawFn) -> StepSample:
    replicas = draw(st.integers(1, 16))
    nodes = draw(st.integers(1, replicas))
    step = draw(st.floats(1e-4, 10.0))
    sync = draw(st.floats(0.0, step)) if replicas > 1 else 0.0
    return StepSample(nodes, replicas, draw(st.integers(1, 512)), step, sync)


@st.composite
def reports(draw: st.DrawFn) -> JobGoodput:
    stats = draw(
        st.one_of(
            st.none(),
            st.tuples(st.floats(-1.0, 10.0), st.floats(0.0, 100.0)),
            st.tuples(st.floats(1e-9, 10.0), st.just(0.0)),
        )
    )
    return JobGoodput(
        draw(limits()),
        tuple(draw(st.lists(samples(), max_size=4))),
        None if stats is None else stats[0],
        None if stats is None else stats[1],
        draw(st.one_of(st.none(), st.just(0.0), st.floats(0.0, 1e7))),
        draw(st.integers(0, 5)),
    )


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterView:
    nodes = tuple(
        NodeView.new(f"n{i}", draw(st.integers(0, 8)), cpus=draw(st.sampled_from([0.0, 16.0])))
        for i in range(draw(st.integers(1, 4)))
    )
    fields: dict[str, st.SearchStrategy[object]] = {
        "cpus": st.sampled_from([0.0, 2.0]),
        "estimated_duration": st.one_of(st.none(), st.floats(1, 5000)),
        "preemptible": st.booleans(),
    }

    def a_job(job_id: int) -> JobView:
        return elastic_job(draw, job_id, most_gpus=8, widest=32, fields=fields)

    # A running elastic job may run at any size of its range.
    snapshot = fill(
        draw,
        nodes,
        a_job,
        running=5,
        pending=(0, 6),
        size=lambda j: st.integers(j.least_gpus, j.most_gpus),
    )
    jobs = [*snapshot.running, *snapshot.pending]
    goodput = {j.id: draw(reports()) for j in jobs if draw(st.booleans())}
    if draw(st.booleans()):
        goodput[999] = draw(reports())  # a job that has ended since it reported
    return snapshot.view(goodput=goodput)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    view=snapshots(),
    spec=st.sampled_from(["goodput", "goodput:fairness=0", "goodput:restart_cost=0:fairness=1"]),
)
def test_any_reports_give_valid_deterministic_passes_within_the_limits(
    view: ClusterView, spec: str
) -> None:
    decisions = create(spec).decide(view)
    assert create(spec).decide(view) == decisions
    # GPUs twice, gangs, sizes, CPUs, non-preemptible jobs moved, unknown jobs.
    replay(view, decisions)
    jobs = {j.id: j for j in [*view.pending, *view.running]}
    reports = view.goodput or {}
    for d in decisions:
        if not isinstance(d, Start | Resize) or d.job_id not in reports:
            continue
        job, info = jobs[d.job_id], reports[d.job_id]
        measured = max((s.replicas for s in info.samples), default=0)
        cap = min(job.most_gpus, info.limits.max_replicas)
        cap = min(cap, max(job.least_gpus, math.floor(EXPLORE * measured), 1))
        assert d.placement.num_gpus <= max(cap, job.allocated_gpus), (d, info)


@settings(max_examples=300, deadline=None)
@given(
    limits=limits(),
    measured=st.lists(samples(), max_size=4),
    stats=st.tuples(st.floats(-1.0, 10.0), st.floats(0.0, 100.0)),
    replicas=st.integers(1, 64),
)
def test_the_chosen_batch_is_one_the_limits_allow(
    limits: BatchLimits,
    measured: list[StepSample],
    stats: tuple[float, float],
    replicas: int,
) -> None:
    params = fit_throughput(tuple(measured)) if measured else None
    model = GoodputModel(limits, params, noise_ratio(*stats))
    nodes = -(-replicas // 8)
    choice = model.best(nodes, replicas)
    if replicas > limits.max_replicas:
        assert choice is None
    if choice is None:
        return
    assert choice.batch == replicas * choice.atomic * (choice.accum + 1)
    assert limits.min_local <= choice.atomic <= limits.max_local
    # At most the largest batch allowed (the least each GPU may take when there
    # are more GPUs than that allows for). Rounding to whole local batches may
    # land a little under the initial batch; the rate then scales down with it.
    assert choice.batch <= max(limits.max_batch, replicas * limits.min_local)
    assert math.isfinite(choice.goodput) and choice.goodput >= 0
    # AdaScale's gain: no loss at a bigger batch, never better than linear.
    scale = choice.batch / limits.init_batch
    assert min(1.0, scale) - 1e-9 <= model.gain(choice.batch) <= scale + 1e-9
