"""Invariants of every registered policy in the simulator, over random clusters and workloads.

Checked from the simulator's own start/stop segment log, independently
of the ledger that enforced them during the run:
- no GPU is held by two jobs at any instant, and no node's CPUs or
  memory are over-committed;
- a job always holds a whole placement of an allowed size (a gang
  starts all-or-nothing), and never runs twice at once;
- every job completes exactly once, never before its submission, and
  the work done across its segments adds up to its duration.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from schedulearn.core import available, create
from schedulearn.sim import LinearSpeed, Segment, SimJob, Workload, parse_cluster, simulate
from schedulearn.sim.cluster import ClusterSpec
from schedulearn.sim.feasibility import why_unfit
from schedulearn.sim.speed import ClusterShape

EPS = 1e-6


@st.composite
def clusters(draw: st.DrawFn) -> ClusterSpec:
    segments = []
    for _ in range(draw(st.integers(1, 3))):
        count = draw(st.integers(1, 3))
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        kind = draw(st.sampled_from(["", "", ":k80", ":v100"]))
        cpus = draw(st.sampled_from([8, 16, 32]))
        mem = draw(st.sampled_from([32, 64, 128]))
        segments.append(f"{count}x{gpus}{kind}:cpus={cpus}:mem={mem}")
    return parse_cluster("+".join(segments))


@st.composite
def workloads(draw: st.DrawFn, cluster: ClusterSpec) -> Workload:
    total = cluster.total_gpus
    types = sorted({n.gpu_type for n in cluster.nodes if n.gpu_type})
    jobs = []
    for i in range(draw(st.integers(1, 14))):
        gpus = draw(st.integers(0, min(total, 8)))
        elastic = gpus >= 2 and draw(st.booleans())
        jobs.append(
            SimJob(
                id=i,
                submitted_at=float(draw(st.integers(0, 400))),
                gpus=gpus,
                duration=float(draw(st.integers(1, 500))),
                cpus=float(draw(st.sampled_from([0, 0, 1, 4, 8]))) if gpus else 2.0,
                memory_gb=float(draw(st.sampled_from([0, 0, 8, 24]))),
                min_gpus=max(1, gpus // 2) if elastic else None,
                max_gpus=min(total, gpus * 2) if elastic else None,
                gpu_type=draw(st.sampled_from([None, *types])) if types and gpus else None,
                deadline=float(draw(st.integers(100, 3000))) if draw(st.booleans()) else None,
                preemptible=draw(st.sampled_from([True, True, True, False])),
                group=f"g{i % 3}" if draw(st.booleans()) else None,
            )
        )
    return Workload("random", tuple(jobs))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ClusterSpec, Workload, LinearSpeed]:
    cluster = draw(clusters())
    workload = draw(workloads(cluster))
    assume(all(why_unfit(j, cluster) is None for j in workload.jobs))
    speed = LinearSpeed(
        efficiency=draw(st.sampled_from([0.5, 0.9, 1.0])),
        spread_penalty=draw(st.sampled_from([0.0, 0.2])),
        start_cost=draw(st.sampled_from([0.0, 5.0])),
        restart_cost=draw(st.sampled_from([0.0, 10.0, 30.0])),
    )
    return cluster, workload, speed


def check_run(cluster: ClusterSpec, workload: Workload, speed: LinearSpeed, policy: str) -> None:
    result = simulate(workload, cluster, create(policy), speed)
    by_id = {j.id: j for j in workload.jobs}
    nodes = {n.name: n for n in cluster.nodes}
    segments = sorted(result.segments, key=lambda s: (s.start, s.job_id))

    # No GPU held by two jobs at once; CPUs and memory within each node.
    holds: dict[tuple[str, int], list[tuple[float, float, int]]] = defaultdict(list)
    for s in segments:
        for name, gpus in s.placement:
            assert name in nodes, f"job {s.job_id} placed on unknown node {name}"
            assert len(set(gpus)) == len(gpus)
            for g in gpus:
                assert 0 <= g < nodes[name].num_gpus
                holds[name, g].append((s.start, s.end, s.job_id))
    for (name, g), spans in holds.items():
        spans.sort()
        for (_, end, a), (start, _, b) in pairwise(spans):
            assert start >= end - EPS, f"GPU {g} of {name} held by jobs {a} and {b} at once"
    instants = sorted({s.start for s in segments})
    for t in instants:
        used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for s in segments:
            if s.start <= t < s.end:
                job = by_id[s.job_id]
                for name, gpus in s.placement:
                    whole = s.placement.num_gpus
                    share = len(gpus) / whole if whole and s.placement.num_nodes > 1 else 1.0
                    used[name][0] += job.cpus * share
                    used[name][1] += job.memory_gb * share
        for name, (cpus, mem) in used.items():
            assert cpus <= nodes[name].cpus + EPS and mem <= nodes[name].memory_gb + EPS

    # Gangs all-or-nothing; one run at a time per job; types respected.
    shape = ClusterShape.of(cluster.nodes)
    per_job: dict[int, list[Segment]] = defaultdict(list)
    for s in segments:
        job = by_id[s.job_id]
        least = job.min_gpus if job.min_gpus is not None else job.gpus
        most = job.max_gpus if job.max_gpus is not None else job.gpus
        assert least <= s.placement.num_gpus <= most
        assert s.placement.num_nodes >= 1
        if job.gpu_type and job.gpus:
            assert all(nodes[n].gpu_type == job.gpu_type for n, g in s.placement if g)
        per_job[s.job_id].append(s)
    for jid, segs in per_job.items():
        for before, after in pairwise(segs):
            assert after.start >= before.end - EPS, f"job {jid} ran twice at once"

    # Every job completes exactly once, after its submission, with all its work done.
    records = {r.id: r for r in result.records}
    assert result.summary.unfinished == 0, f"{policy} left jobs unfinished"
    for jid, job in by_id.items():
        segs = [s for s in result.segments if s.job_id == jid]
        done = [s for s in segs if s.end_reason == "completed"]
        assert len(done) == 1, f"job {jid} completed {len(done)} times"
        assert segs[-1] is done[0]
        assert segs[0].start >= job.submitted_at - EPS
        assert records[jid].end == done[0].end >= job.submitted_at
        work = 0.0
        for i, s in enumerate(segs):
            cost = speed.start_cost if i == 0 else speed.restart_cost
            work += max(0.0, s.end - s.start - cost) * speed.rate(job, s.placement, shape)
        assert work == pytest.approx(job.duration, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("policy", available())
@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_policy_keeps_the_invariants(
    policy: str, scenario: tuple[ClusterSpec, Workload, LinearSpeed]
) -> None:
    check_run(*scenario, policy)
