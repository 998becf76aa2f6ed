"""`--constraint` in the simulator: labelled cluster nodes, constrained jobs, every policy.

The engine applies every pass through the ledger, which refuses a job on
a node that lacks its labels (a `PolicyError`), and the segment log says
where each run was; so a whole run per policy shows the rule holds in
the simulator as it does live.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedulearn.cli.main import app
from schedulearn.core import available, create
from schedulearn.sim.cluster import parse_cluster
from schedulearn.sim.engine import Simulator
from schedulearn.sim.jobs import SimInputError, SimJob, Workload
from schedulearn.sim.workloads.constraints import with_constraints
from schedulearn.sim.workloads.spec import parse_workload

SPECS = [*available(), "fifo:backfill=true", "elastic-fifo:min_age=0", "timeslice:quantum=60"]
CLUSTER = "2x4:label=ib+2x4"  # n0, n1 carry ib; n2, n3 do not


def test_cluster_segments_carry_labels_and_bad_ones_are_refused() -> None:
    cluster = parse_cluster("1x8:v100:label=ib,nvme:label=rack=r1+2x4")
    assert cluster.nodes[0].capabilities.labels == {"ib", "nvme", "rack=r1"}
    assert cluster.nodes[1].capabilities.labels == frozenset()
    assert parse_cluster(cluster.describe()).nodes[0].capabilities == cluster.nodes[0].capabilities
    with pytest.raises(SimInputError, match="letters, digits"):
        parse_cluster("2x4:label=has space")


def test_a_spec_constrains_a_share_of_its_jobs_the_same_for_a_seed() -> None:
    (half,) = parse_workload("poisson:n=200:constraint=ib:constrained=0.5", seed=3)
    constrained = [j.id for j in half.jobs if j.constraints == ("ib",)]
    assert 60 < len(constrained) < 140
    (again,) = parse_workload("poisson:n=200:constraint=ib:constrained=0.5", seed=3)
    assert [j.id for j in again.jobs if j.constraints] == constrained
    (every,) = parse_workload("poisson:n=20:constraint=ib,nvme")
    assert all(j.constraints == ("ib", "nvme") for j in every.jobs)
    with pytest.raises(SimInputError, match="not a number"):
        parse_workload("poisson:n=5:constraint=ib:constrained=half")


def test_a_job_no_node_is_labelled_for_is_refused_before_the_run() -> None:
    workload = with_constraints(Workload("w", (SimJob(1, 0.0, 1, 60.0),)), ["a100-80g"])
    with pytest.raises(SimInputError, match=r"needs label a100-80g.*labels present: ib"):
        Simulator(workload, parse_cluster(CLUSTER), create("fifo"))


@pytest.mark.parametrize("spec", SPECS)
def test_every_policy_runs_constrained_jobs_only_on_labelled_nodes(spec: str) -> None:
    (workload,) = parse_workload(
        "poisson:n=80:rate=0.02:gpus=1,2,4:duration=300:constraint=ib:constrained=0.4", seed=1
    )
    result = Simulator(workload, parse_cluster(CLUSTER), create(spec)).run()
    assert result.summary.unfinished == 0
    constrained = {j.id for j in workload.jobs if j.constraints}
    on: dict[bool, set[str]] = {True: set(), False: set()}
    for seg in result.segments:
        on[seg.job_id in constrained].update(seg.placement.nodes)
    assert on[True] and on[True] <= {"n0", "n1"}
    # The others may go anywhere, and do: the rule filters, it does not reserve.
    assert on[False] & {"n2", "n3"}


def test_simulate_takes_constraint_and_labelled_cluster(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    runner = CliRunner()
    args = ["simulate", "-w", "poisson:n=30:gpus=1", "-c", CLUSTER, "-p", "fifo,srtf"]
    result = runner.invoke(app, [*args, "--constraint", "ib", "--json", str(out)])
    assert result.exit_code == 0, result.output
    summaries = {r["policy"]: r["summary"] for r in json.loads(out.read_text())["results"]}
    assert summaries["fifo"]["jobs"] == summaries["srtf"]["jobs"] == 30
    refused = runner.invoke(app, [*args, "--constraint", "a100-80g"])
    assert refused.exit_code == 2
    assert "a100-80g" in refused.output and "label=" in refused.output


def test_the_forecast_of_a_live_queue_keeps_node_capabilities() -> None:
    """The forecast copies the live nodes and jobs: a labelled or container node
    stays one, so constrained and image jobs wait for it while a plain node idles."""
    from schedulearn.core.capabilities import ExecutorKind, NodeCapabilities
    from schedulearn.core.views import ClusterView, GpuView, JobView, NodeView, Placement
    from schedulearn.sim.forecast import forecast

    now = 1_000.0

    def node(name: str, holder: int | None, caps: NodeCapabilities) -> NodeView:
        gpus = tuple(GpuView(i, "", f"{name}-{i}", 0, holder) for i in range(2))
        return NodeView(name, gpus, 48.0, 128.0, 48.0, 128.0, True, caps)

    docker = NodeCapabilities(
        executors=frozenset({ExecutorKind.PROCESS, ExecutorKind.CONTAINER}),
        container_runtime="docker 27",
    )
    nodes = (
        node("plain", None, NodeCapabilities()),
        node("ib", 1, NodeCapabilities(labels=frozenset({"ib"}))),
        node("box", 4, docker),
    )
    holding = (
        JobView(id=1, submitted_at=0.0, gpus=2, placement=Placement.single("ib", [0, 1]),
                started_at=now - 100, constraints=("ib",)),
        JobView(id=4, submitted_at=0.0, gpus=2, placement=Placement.single("box", [0, 1]),
                started_at=now - 50, image="busybox"),
    )  # fmt: skip
    queue = (
        JobView(id=3, submitted_at=now - 5, gpus=1, image="busybox"),
        JobView(id=2, submitted_at=now - 4, gpus=1, constraints=("ib",)),
    )
    view = ClusterView(now, nodes, queue, holding)
    f = forecast(view, {1: 300.0, 4: 100.0, 2: 50.0, 3: 10.0}, create("fifo"))
    # Each waits for its node's job to end, though the plain node is free now.
    assert f.jobs[3].start == pytest.approx(now + 50)
    assert f.jobs[2].start == pytest.approx(now + 200)
