"""`schedulearn simulate --tenants`: queues from a Philly-format trace or a queue
file, the fair-share layer in the shared run, the per-queue report, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from schedulearn.cli.main import app

runner = CliRunner()


def philly_csv(tmp_path: Path) -> Path:
    """Team a fills a 4-GPU node with 2-GPU jobs at t=0; team b asks for 1 GPU twice at t=600."""
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    rows += ["2017-10-01 00:00:00,3600.0,2,7200.0,a" for _ in range(4)]
    rows += ["2017-10-01 00:10:00,100.0,1,100.0,b" for _ in range(2)]
    path = tmp_path / "two-teams.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def queue_file(tmp_path: Path, half_life: str = "") -> Path:
    path = tmp_path / "queues.toml"
    path.write_text(f"{half_life}\n[queues.a]\nguaranteed = 2\n\n[queues.b]\nguaranteed = 2\n")
    return path


def simulate(*args: str) -> tuple[str, dict[str, Any]]:
    result = runner.invoke(app, ["simulate", *args, "--processes", "1", "--json", "-"])
    assert result.exit_code == 0, result.output
    text = result.output
    return text, json.loads(text[text.index('{\n  "policies_available"') :])


def test_a_queue_file_gives_b_its_guarantee_back_and_the_report_says_so(
    tmp_path: Path,
) -> None:
    trace, queues = philly_csv(tmp_path), queue_file(tmp_path)
    args = ["-w", str(trace), "-c", "1x4", "--tenants", str(queues), "--min-run", "0"]
    text, data = simulate(*args)
    assert "fifo+queues: per queue" in text
    (result,) = data["results"]
    assert result["policy"] == "fifo+queues"
    assert result["summary"]["preemptions"] >= 1  # a gave 2 GPUs back to b at once
    fair = data["fairness"]["fifo+queues"]
    by = {q["queue"]: q for q in fair["queues"]}
    assert by["a"]["guaranteed"] == by["b"]["guaranteed"] == 2
    assert by["a"]["jobs"] == 4 and by["b"]["jobs"] == 2
    # b's jobs start on arrival (they would wait an hour behind a's without queues).
    assert by["b"]["mean_jct"] < 200
    assert by["b"]["ratio"] == pytest.approx(1.0, abs=0.05)

    # A minimum run time longer than b's wait holds the reclaim back.
    text, data = simulate(*args[:-1], "3000")
    fair = data["fairness"]["fifo+queues"]
    by = {q["queue"]: q for q in fair["queues"]}
    assert by["b"]["mean_jct"] > 2000


def test_philly_tenants_share_the_cluster_by_gpu_hours(tmp_path: Path) -> None:
    text, data = simulate(
        "-w", str(philly_csv(tmp_path)), "-c", "1x4", "--tenants", "philly", "--half-life", "0"
    )
    fair = data["fairness"]["fifo+queues"]
    # a has 28,800 of the 29,000 GPU-seconds: 3.97 GPUs, rounded down to 3;
    # the GPU left is promised to nobody (lent by weight).
    assert {q["queue"]: q["guaranteed"] for q in fair["queues"]} == {"a": 3, "b": 0}
    assert "Jain's index over per-queue slowdowns" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--min-run", "60"], "--min-run and --half-life apply to queues; add --tenants"),
        (["--tenants", "/no/such.toml"], "queue file '/no/such.toml' does not exist"),
        (["--tenants", "philly", "--min-run", "-1"], "--min-run must be 0 or more seconds"),
        (["--tenants", "philly", "--half-life", "-5"], "--half-life must be positive seconds"),
        (["--tenants", "philly", "--round", "60"], "--tenants runs one workload without --round"),
    ],
)
def test_bad_tenant_options_are_one_line_saying_what_to_change(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    trace = philly_csv(tmp_path)
    result = runner.invoke(app, ["simulate", "-w", str(trace), "-c", "1x4", *extra])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_a_workload_without_queues_needs_a_queue_file() -> None:
    result = runner.invoke(
        app, ["simulate", "-w", "poisson:n=5", "-c", "1x4", "--tenants", "philly"]
    )
    assert result.exit_code == 2
    assert "names no queues" in result.output


def test_a_queue_file_may_nest_queues_and_a_tree_that_cannot_be_kept_is_one_line(
    tmp_path: Path,
) -> None:
    # a and b share research's 4 GPUs: a's four 2-GPU jobs use b's part
    # until b's jobs arrive, then b takes its 2 GPUs back at once.
    tree = tmp_path / "tree.toml"
    tree.write_text(
        "[queues.research]\nguaranteed = 4\n\n"
        '[queues.a]\nguaranteed = 2\nparent = "research"\n\n'
        '[queues.b]\nguaranteed = 2\nparent = "research"\n'
    )
    _, data = simulate(
        "-w", str(philly_csv(tmp_path)), "-c", "1x4", "--tenants", str(tree), "--min-run", "0"
    )
    by = {q["queue"]: q for q in data["fairness"]["fifo+queues"]["queues"]}
    assert set(by) == {"a", "b"}  # research runs no jobs of its own
    assert by["b"]["mean_jct"] < 200
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[queues.research]\nguaranteed = 1\n\n[queues.a]\nguaranteed = 2\nparent = "research"\n'
    )
    result = runner.invoke(
        app, ["simulate", "-w", str(philly_csv(tmp_path)), "-c", "1x4", "--tenants", str(bad)]
    )
    assert result.exit_code == 2, result.output
    assert "guaranteed 2 GPUs together, more than its 1" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_philly_queues_grouped_under_parents_keep_their_guarantees() -> None:
    from schedulearn.sim.jobs import SimJob, Workload
    from schedulearn.sim.tenants import proportional

    jobs = tuple(
        SimJob(id=i, submitted_at=float(i), gpus=1, queue=q, duration=d)
        for i, (q, d) in enumerate([("x", 400.0), ("y", 300.0), ("z", 200.0), ("w", 100.0)])
    )
    tenancy = proportional(Workload("four", jobs), 10, parents=2)
    by = tenancy.by_name
    assert {q: by[q].guaranteed_gpus for q in "xyzw"} == {"x": 4, "y": 3, "z": 2, "w": 1}
    # Largest first, each to the lighter group: x | y, then z joins y, w joins x.
    assert {q: by[q].parent for q in "xyzw"} == {
        "x": "group-1",
        "y": "group-2",
        "z": "group-2",
        "w": "group-1",
    }
    assert by["group-1"].guaranteed_gpus == 5 and by["group-2"].guaranteed_gpus == 5
