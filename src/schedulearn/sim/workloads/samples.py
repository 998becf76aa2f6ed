"""Regenerate the small trace samples shipped in `schedulearn/sim/data/`.

The full traces stay outside the package (`../shared/traces`); the
samples are written by this project's own loaders and writers, so they
are exactly what the loaders read back:

    uv run python -m schedulearn.sim.workloads.samples ../shared/traces

- `philly-sample.csv`: the first 1,000 submissions of the Philly trace;
- `pollux-sample.csv`: the first 40 jobs of Pollux's workload-6;
- `tiresias-sample.csv`: the first 30 jobs of Tiresias's 60_job.csv.
"""

from __future__ import annotations

import sys
from pathlib import Path

from schedulearn.sim.jobs import Workload
from schedulearn.sim.workloads.traces import load_philly, load_pollux, load_tiresias, write_sample

DATA = Path(__file__).resolve().parent.parent / "data"


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


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/traces")
    for path in write_all(root):
        print(path)
