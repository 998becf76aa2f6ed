"""PNG plots of simulation results: JCT CDF, GPU utilisation and queue length over time.

One set of three files per workload, each comparing the policies run on
it: `<workload>-jct-cdf.png`, `<workload>-utilisation.png`,
`<workload>-queue.png`. matplotlib runs with the Agg backend (no display).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from schedulearn.sim.results import SimResult

MAX_POINTS = 4000


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "workload"


def _steps(result: SimResult, which: str) -> tuple[list[float], list[float]]:
    series = result.series.downsample(MAX_POINTS)
    values = series.busy_gpus if which == "busy" else series.queued
    times = [t / 3600.0 for t in series.times]
    if which == "busy":
        total = max(result.total_gpus, 1)
        return times, [100.0 * v / total for v in values]
    return times, [float(v) for v in values]


def plot_results(results: Sequence[SimResult], out_dir: Path) -> list[Path]:
    """Write the plots for every workload in `results`; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    by_workload: dict[str, list[SimResult]] = {}
    for r in results:
        by_workload.setdefault(r.workload, []).append(r)
    written: list[Path] = []
    for workload, runs in by_workload.items():
        slug = _slug(workload)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in runs:
            jcts = r.jcts()
            if not jcts:
                continue
            ys = [(i + 1) / len(jcts) for i in range(len(jcts))]
            ax.step(jcts, ys, where="post", label=r.policy)
        ax.set_xscale("log")
        ax.set_xlabel("job completion time (s, log scale)")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"JCT CDF: {workload}")
        ax.grid(True, alpha=0.3)
        ax.legend()
        written.append(_save(fig, out_dir / f"{slug}-jct-cdf.png"))
        for which, ylabel, name in (
            ("busy", "GPUs busy (%)", "utilisation"),
            ("queue", "jobs waiting", "queue"),
        ):
            fig, ax = plt.subplots(figsize=(8, 4))
            for r in runs:
                xs, ys = _steps(r, which)
                ax.step(xs, ys, where="post", label=r.policy, linewidth=0.9)
            ax.set_xlabel("simulated time (hours)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{ylabel} over time: {workload} on {runs[0].cluster}")
            ax.grid(True, alpha=0.3)
            ax.legend()
            written.append(_save(fig, out_dir / f"{slug}-{name}.png"))
    return written


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
