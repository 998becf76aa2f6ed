"""bench/scale.py end to end at a tiny size: a real server on SQLite and 5
lightweight agents in 2 worker processes, each node enrolled with its own
join token, run 20 Philly-drawn jobs (and the probe's submissions) to the
end over the real agent wire.

Asserts what the run did, never how fast: every job succeeded, every
heartbeat and GPU reuse was measured, no node was marked down or asked to
register again, and the server stopped no run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_scale_bench_runs_every_job_to_success(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    args = ["--hosts", "5", "--jobs", "20", "--database", "sqlite", "--procs", "2"]
    args += ["--drain", "6", "--warmup", "1", "--window", "4", "--until-done"]
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "scale.py"), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [figures] = json.loads(out.read_text())
    assert figures["hosts"] == 5
    # 20 queued jobs and at least one probe submission (one every 0.25 s).
    assert figures["jobs_total"] > 20
    assert figures["jobs_succeeded"] == figures["jobs_ended"] == figures["jobs_total"]
    assert figures["nodes_down"] == 0
    assert figures["reregistered"] == 0
    assert figures["stopped"] == {}
    assert figures["heartbeats"] > 0
    assert figures["free_to_start_n"] > 0
    assert figures["agent_errors"] == []
    assert "GPU free -> next start" in run.stdout
