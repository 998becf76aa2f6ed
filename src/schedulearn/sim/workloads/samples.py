"""Regenerate the trace data the project ships, from the public files.

Both sets are written by this project's own loaders and writers, so they
are exactly what the loaders read back:

    uv run python -m schedulearn.sim.workloads.samples ../shared/traces

Small samples inside the package (`schedulearn/sim/data/`, in every wheel):

- `philly-sample.csv`: the first 1,000 submissions of the Philly trace;
- `pollux-sample.csv`: the first 40 jobs of Pollux's workload-6;
- `tiresias-sample.csv`: the first 30 jobs of Tiresias's 60_job.csv.

The traces the docs and benchmarks use, in the checkout's `traces/`
(not in the wheel; `traces/README.md` names sources and licences), laid
out like the public set so `--workload traces/pollux/workloads/...`
finds its speed tables in `traces/pollux/apps/`:

- `philly/philly-jobs.csv`: the whole Philly trace;
- `pollux/workloads/workload-{1..8}.csv` and `pollux/apps/<app>/`: the
  columns of the measured tables the speed model reads;
- `tiresias/60_job.csv` and the cluster files `n*.csv`;
- `gavel/simulation_throughputs.json`: the jobs-alone throughputs.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from schedulearn.sim.cluster import TIRESIAS_CLUSTER_COLUMNS
from schedulearn.sim.gavel import gavel_json, load_gavel
from schedulearn.sim.jobs import Workload
from schedulearn.sim.measured import EPOCHS, TABLE_COLUMNS, read_table
from schedulearn.sim.workloads.traces import load_philly, load_pollux, load_tiresias, write_sample

DATA = Path(__file__).resolve().parent.parent / "data"
CHECKOUT_TRACES = Path(__file__).resolve().parents[4] / "traces"


def _head(workload: Workload, n: int) -> Workload:
    return Workload(workload.name, workload.jobs[:n], workload.description, workload.source)


def write_all(traces: Path, out: Path = DATA) -> list[Path]:
    """Write every sample from the traces directory; returns the files written."""
    written = []
    philly = load_philly(traces / "philly" / "philly-jobs.csv", limit=1000)
    write_sample(philly, "philly", out / "philly-sample.csv")
    written.append(out / "philly-sample.csv")
    pollux = _head(load_pollux(traces / "pollux" / "workloads" / "workload-6.csv"), 40)
    write_sample(pollux, "pollux", out / "pollux-sample.csv")
    written.append(out / "pollux-sample.csv")
    tiresias = _head(load_tiresias(traces / "tiresias" / "60_job.csv"), 30)
    write_sample(tiresias, "tiresias", out / "tiresias-sample.csv")
    written.append(out / "tiresias-sample.csv")
    return written


def _write_columns(rows: list[dict[str, str]], columns: tuple[str, ...], out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        writer.writerows([row[c] for c in columns] for row in rows)
    return out


def _write_apps(source: Path, out: Path) -> list[Path]:
    """The measured tables of each known application, only the columns `measured` reads."""
    written = []
    for app in sorted(p for p in source.iterdir() if p.is_dir() and p.name in EPOCHS):
        for table in sorted(app.glob("*.csv")):
            kind = "validation" if table.stem.startswith("validation-") else table.stem
            columns = TABLE_COLUMNS[kind]
            written.append(_write_columns(read_table(table), columns, out / app.name / table.name))
    return written


def write_traces(traces: Path, out: Path = CHECKOUT_TRACES) -> list[Path]:
    """Write the traces the docs use into `out` (the checkout's `traces/`)."""
    written = []
    philly = out / "philly" / "philly-jobs.csv"
    philly.parent.mkdir(parents=True, exist_ok=True)
    write_sample(load_philly(traces / "philly" / "philly-jobs.csv"), "philly", philly)
    written.append(philly)
    for source in sorted((traces / "pollux" / "workloads").glob("workload-*.csv")):
        target = out / "pollux" / "workloads" / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_sample(load_pollux(source), "pollux", target)
        written.append(target)
    written += _write_apps(traces / "pollux" / "apps", out / "pollux" / "apps")
    jobs = out / "tiresias" / "60_job.csv"
    jobs.parent.mkdir(parents=True, exist_ok=True)
    write_sample(load_tiresias(traces / "tiresias" / "60_job.csv"), "tiresias", jobs)
    written.append(jobs)
    for cluster in sorted((traces / "tiresias").glob("n*.csv")):
        target = jobs.parent / cluster.name
        written.append(_write_columns(read_table(cluster), TIRESIAS_CLUSTER_COLUMNS, target))
    gavel = out / "gavel" / "simulation_throughputs.json"
    gavel.parent.mkdir(parents=True, exist_ok=True)
    table = load_gavel(traces / "gavel" / "simulation_throughputs.json")
    gavel.write_text(json.dumps(gavel_json(table), indent=1, sort_keys=True) + "\n")
    written.append(gavel)
    return written


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/traces")
    for path in write_all(root) + write_traces(root):
        print(path)
