"""bench/fairness_ratio.py: the `limit:` line for a missed sharing-incentive
ratio says where the queue's JCT went against its alone run, with the
figures of real replays (issue 32, item 2)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from schedulearn.core.fairshare_queues import Queue, Tenancy
from schedulearn.core.registry import create
from schedulearn.sim.cluster import parse_cluster
from schedulearn.sim.engine import Simulator
from schedulearn.sim.jobs import SimJob, Workload
from schedulearn.sim.tenants import QueueFairness

BENCH = Path(__file__).resolve().parents[3] / "bench"


def bench_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fairness_ratio", BENCH / "fairness_ratio.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fairness_ratio"] = module
    spec.loader.exec_module(module)
    return module


def four_jobs() -> Workload:
    """Queue a's four 1-GPU jobs of an hour each, all waiting from 0."""
    jobs = tuple(
        SimJob(id=i, submitted_at=0.0, gpus=1, queue="a", duration=3600.0) for i in range(4)
    )
    return Workload("four", jobs)


def test_a_queue_that_waited_longer_than_alone_is_told_so_with_figures() -> None:
    fr = bench_module()
    tenancy = Tenancy((Queue.of("a", 4),))
    workload = four_jobs()
    # Alone on its 4 guaranteed GPUs every job starts at once; "shared" here
    # is the same jobs on 1 GPU: they wait 0, 1, 2 and 3 hours.
    alone = fr.alone_run(workload, parse_cluster("1x4"), tenancy, "fifo", "a")
    assert alone is not None and {r.first_start for r in alone.records} == {0.0}
    shared = Simulator(workload, parse_cluster("1x1"), create("fifo")).run()
    row = QueueFairness("a", 4, 4, 9000.0, 2.5, 3600.0, 9000.0)
    line = fr.ratio_line(row, 1.1, shared, alone)
    assert line.startswith(
        "ratio: worst is queue a (2.500; plain 1.100): its 4 jobs that fit its 4 GPUs (1 GPU each)"
    )
    assert "took 2.5 h on average against 1.0 h alone" in line
    assert "1.5 h to their first start (alone 0.0), then 1.0 h to their end (alone 1.0)" in line
    assert "0.0 preemptions a job (alone 0.0)" in line
    assert "Why: waiting or suspended" in line and "(a rule's limit)" in line
    # Its jobs ran at full speed once started: nothing is blamed on placement.
    assert "placement" not in line


def test_a_queue_with_no_alone_run_gets_the_rule_only() -> None:
    fr = bench_module()
    shared = Simulator(four_jobs(), parse_cluster("1x1"), create("fifo")).run()
    row = QueueFairness("a", 4, 4, 9000.0, 2.5, 3600.0, 9000.0)
    line = fr.ratio_line(row, None, shared, None)
    assert line.startswith("ratio: worst is queue a (2.500; plain -): a guarantee is kept")
    assert line.endswith("a rule's limit, not one of construction")
    assert (
        fr.alone_run(four_jobs(), parse_cluster("1x4"), Tenancy((Queue.of("a", 0),)), "fifo", "a")
        is None
    )
