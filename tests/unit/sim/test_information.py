"""Issue 34: the simulator hands a policy only what a live system could know.

A live job reports its measured steps, gradient statistics, progress and,
when its spec declares one, its total (`GoodputReport`); the host counts
its restarts and may learn estimates from jobs that already ended. These
tests replay Pollux workloads with a policy that records every snapshot,
and check that nothing else reached it: no job's remaining work unless
declared or learned from *other* ended jobs, no expected duration or
fraction done derived from the job's true length, and every `JobGoodput`
built by the one contract the live scheduler uses (`JobGoodput.of_report`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest

from schedulearn.core import create
from schedulearn.core.decisions import Decision
from schedulearn.core.goodput import GoodputReport, JobGoodput
from schedulearn.core.policies.goodput import Goodput
from schedulearn.core.views import ClusterView, Placement
from schedulearn.sim import parse_cluster
from schedulearn.sim.engine import Simulator
from schedulearn.sim.job_learning import JobLearning
from schedulearn.sim.jobs import SimJob, Workload
from schedulearn.sim.measured import MeasuredSpeed
from schedulearn.sim.runner import adapt
from schedulearn.sim.runstate import RunState
from schedulearn.sim.speed import ClusterShape
from schedulearn.sim.workloads.spec import parse_workload

# Where each field a policy reads of a job's goodput comes from live: the job's
# report (`GoodputReport`), its stored step samples, the host's own counts, or
# an estimate learned from ended jobs. A field added to `JobGoodput` must say
# here where a live host gets it, or this test fails.
LIVE_SOURCE = {
    "limits": "report: init_batch, max_batch, min/max_local_batch; the spec: a fixed batch",
    "samples": "report: step_time and sync_time at each configuration run",
    "grad_sqr": "report",
    "grad_var": "report",
    "remaining": "report: target - progress when declared; else a learned estimate",
    "restarts": "host: preemptions + resizes + migrations",
    "progress": "report",
    "estimated": "host: whether `remaining` came from its learned estimate (no declared total)",
}


class Recorder(Goodput):
    """The goodput policy, keeping every snapshot it was handed."""

    name: ClassVar[str] = "goodput"

    def __init__(self) -> None:
        super().__init__()
        self.views: list[ClusterView] = []

    def decide(self, view: ClusterView) -> list[Decision]:
        self.views.append(view)
        return super().decide(view)


@pytest.fixture
def apps(traces: Path) -> Path:
    return traces / "pollux" / "apps"


def replay(traces: Path, apps: Path, lengths: str, jobs: int = 40) -> list[ClusterView]:
    path = traces / "pollux" / "workloads" / "workload-6.csv"
    (marked,) = parse_workload(f"{path}:adaptive:lengths={lengths}")
    speed = MeasuredSpeed(apps)
    workload = adapt(marked, speed)
    workload = Workload(workload.name, workload.jobs[:jobs], params=workload.params)
    policy = Recorder()
    result = Simulator(workload, parse_cluster("16x4"), policy, speed, round_seconds=60.0).run()
    assert result.summary.finished == jobs
    return policy.views


def test_every_field_a_policy_reads_has_a_live_source() -> None:
    assert {f.name for f in dataclasses.fields(JobGoodput)} == set(LIVE_SOURCE)


def test_without_declared_lengths_no_policy_learns_a_jobs_length(traces: Path, apps: Path) -> None:
    views = replay(traces, apps, "none")
    seen = 0
    for view in views:
        for job in (*view.pending, *view.running):
            # Nothing about its length: no expected duration, no fraction done.
            assert job.estimated_duration is None and job.progress is None, job
        for info in (view.goodput or {}).values():
            assert info.remaining is None
            seen += bool(info.samples)
    assert seen  # the jobs did report measured steps


def test_declared_totals_give_the_remaining_work(traces: Path, apps: Path) -> None:
    views = replay(traces, apps, "declared")
    infos = [i for v in views for i in (v.goodput or {}).values()]
    assert infos and all(i.remaining is not None for i in infos)
    running = [j for v in views for j in v.running]
    assert running and all(j.progress is not None for j in running)


def test_learned_estimates_come_only_from_jobs_that_ended_before(traces: Path, apps: Path) -> None:
    views = replay(traces, apps, "learned")
    ended: set[str] = set()  # models with a job that ended
    alive: dict[int, str] = {}
    learned = 0
    for view in views:
        active = {j.id: j.model or "" for j in (*view.pending, *view.running)}
        ended.update(model for jid, model in alive.items() if jid not in active)
        alive = active
        for jid, info in (view.goodput or {}).items():
            if info.remaining is not None:
                assert active[jid] in ended, f"job {jid} knew its length before any ended"
                learned += 1
    assert learned  # estimates were learned and used


def test_the_feed_builds_what_a_live_report_gives(apps: Path) -> None:
    """The simulated job's `JobGoodput` is `of_report` of the report it sends."""
    speed = MeasuredSpeed(apps)
    learning = JobLearning(speed)
    job = SimJob(3, 0.0, 4, app="cifar10")
    run = RunState(job, speed.work(job), 1.0, 1.0)
    placement = Placement.single("n0", [0, 1, 2, 3])
    curve = learning.curve(run, placement)
    assert curve is not None
    run.placement, run.curve = placement, curve
    done = curve.advance(0.0, 900.0)
    learning.observe(run, done)
    report = learning.report(run, done)
    info = learning.goodput(run, done)
    assert isinstance(report, GoodputReport) and info is not None
    assert report.target is None and report.progress == done
    assert info == JobGoodput.of_report(report, info.samples, 0, None)
    declared = replace(run.job, declares_total=True)
    run.job = declared
    assert learning.report(run, done) == replace(report, target=run.work)


def test_a_job_picks_its_batch_with_its_fitted_model_not_the_tables(apps: Path) -> None:
    """A job never run starts at its smallest batch (the model's prior); its learnt
    choices are never faster than the true tables' best and, on some epoch, slower."""
    speed = MeasuredSpeed(apps)
    tables = speed.apps["cifar10"]
    learning = JobLearning(speed)
    job = SimJob(5, 0.0, 8, app="cifar10")
    run = RunState(job, speed.work(job), 1.0, 1.0)
    placement = Placement.of({"n0": [0, 1, 2, 3], "n1": [0, 1, 2, 3]})
    curve = learning.curve(run, placement)
    assert curve is not None
    counts = speed.counts_of(placement)
    best, oracle = tables.adaptive_rates(counts)
    assert all(r <= b * (1 + 1e-9) for r, b in zip(curve.rates, best, strict=True))
    assert any(r < b * (1 - 1e-3) for r, b in zip(curve.rates, best, strict=True))
    assert curve.choices != oracle


def test_a_replayed_job_runs_at_the_batches_its_own_model_picks(apps: Path) -> None:
    """In a replay the engine runs the learnt choices, not the tables' best."""
    speed = MeasuredSpeed(apps)
    job = SimJob(0, 0.0, 4, app="cifar10", min_gpus=1, max_gpus=4)
    sim = Simulator(Workload("one", (job,)), parse_cluster("1x4"), create("fifo"), speed)
    (result,) = sim.run().records
    placement = Placement.single("n0", [0, 1, 2, 3])
    run = RunState(job, speed.work(job), 1.0, 1.0)
    learnt = JobLearning(speed).curve(run, placement)
    assert learnt is not None
    oracle = speed.curve(job, placement, ClusterShape.of(parse_cluster("1x4").nodes))
    assert result.end is not None
    took = result.end - result.submitted_at - speed.realloc_cost
    assert took == pytest.approx(learnt.seconds_to(0.0, run.work))
    assert took > oracle.seconds_to(0.0, run.work) * 1.001


def _mean_jct(traces: Path, apps: Path, lengths: str, spec: str, jobs: int = 40) -> float:
    path = traces / "pollux" / "workloads" / "workload-6.csv"
    (marked,) = parse_workload(f"{path}:adaptive:lengths={lengths}")
    speed = MeasuredSpeed(apps)
    workload = adapt(marked, speed)
    workload = Workload(workload.name, workload.jobs[:jobs], params=workload.params)
    simulator = Simulator(workload, parse_cluster("16x4"), create(spec), speed, round_seconds=60.0)
    return simulator.run().summary.mean_jct


def test_fairness_learned_acts_only_where_a_length_is_learned(traces: Path, apps: Path) -> None:
    """`fairness_learned` (issue 34) weighs a pass in which some job's remaining work is
    a learned estimate; with no lengths, or declared ones, it changes nothing."""
    for lengths in ("none", "declared"):
        assert _mean_jct(traces, apps, lengths, "goodput") == _mean_jct(
            traces, apps, lengths, "goodput:fairness_learned=0.9"
        )
    assert _mean_jct(traces, apps, "learned", "goodput") != _mean_jct(
        traces, apps, "learned", "goodput:fairness_learned=0.9"
    )
