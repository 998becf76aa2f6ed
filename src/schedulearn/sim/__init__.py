"""The trace-driven simulator: replay workloads on a virtual cluster under any policy.

It drives the same `Policy.decide` as the live scheduler (DESIGN.md
section 4). Entry points: `simulate` (one policy, one workload) and
`schedulearn.sim.runner.run_all` (policies x workloads, as the CLI does).
"""

from schedulearn.sim.cluster import ClusterSpec, parse_cluster
from schedulearn.sim.engine import PolicyError, Simulator, simulate
from schedulearn.sim.jobs import SimInputError, SimJob, Workload
from schedulearn.sim.results import JobRecord, Segment, Series, SimResult, Summary
from schedulearn.sim.speed import LinearSpeed, SpeedModel, TypeFactors

__all__ = [
    "ClusterSpec",
    "JobRecord",
    "LinearSpeed",
    "PolicyError",
    "Segment",
    "Series",
    "SimInputError",
    "SimJob",
    "SimResult",
    "Simulator",
    "SpeedModel",
    "Summary",
    "TypeFactors",
    "Workload",
    "parse_cluster",
    "simulate",
]
