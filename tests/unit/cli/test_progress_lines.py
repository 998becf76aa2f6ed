"""A long `simulate` whose stderr is not a terminal writes progress lines
(issue 35): `ProgressLines` driven by a fake clock, and the real command
piped, as a CI log or `2> file` would take it."""

from __future__ import annotations

import io
import subprocess
import sys

from schedulearn.cli.progress_lines import ProgressLines
from schedulearn.cli.simulate import PROGRESS_FROM_JOBS


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_at_the_first_report_every_interval_and_at_the_end() -> None:
    stream, clock = io.StringIO(), Clock()
    lines = ProgressLines(stream, every=5.0, clock=clock)
    lines("w / fifo", 10, 1000)
    clock.now += 4.9
    lines("w / fifo", 200, 1000)  # within 5 s of the last line: nothing
    clock.now += 0.2
    lines("w / fifo", 250, 1000)
    clock.now += 10.0
    lines("w / fifo", 1000, 1000)
    lines("w / fifo", 1000, 1000)  # the engine's end report after its last step
    clock.now += 1.0
    lines("w / srtf", 10, 1000)
    assert stream.getvalue().splitlines() == [
        "simulate: w / fifo: 10 of 1,000 jobs finished (1%) after 0 s",
        "simulate: w / fifo: 250 of 1,000 jobs finished (25%) after 5 s",
        "simulate: w / fifo: done, 1,000 jobs in 15 s",
        "simulate: w / srtf: 10 of 1,000 jobs finished (1%) after 0 s",
    ]


def test_simulate_piped_writes_progress_lines_to_stderr() -> None:
    done = subprocess.run(
        [
            sys.executable, "-m", "schedulearn.cli.main", "simulate",
            "-w", f"poisson:n={PROGRESS_FROM_JOBS}:rate=0.05", "-p", "fifo,srtf", "-c", "4x8",
        ],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    lines = done.stderr.splitlines()
    assert lines[0] == f"simulate: 2 runs of up to {PROGRESS_FROM_JOBS:,} jobs; progress every 5 s"
    for policy in ("fifo", "srtf"):
        label = f"simulate: poisson-{PROGRESS_FROM_JOBS} / {policy}: "
        ours = [line for line in lines if line.startswith(label)]
        assert " jobs finished (" in ours[0]
        assert ours[-1].startswith(f"{label}done, {PROGRESS_FROM_JOBS:,} jobs in ")
    assert "mean JCT" in done.stdout  # the table still goes to stdout, after


def test_several_workloads_in_processes_write_a_line_as_each_run_ends() -> None:
    n = PROGRESS_FROM_JOBS
    done = subprocess.run(
        [
            sys.executable, "-m", "schedulearn.cli.main", "simulate", "--processes", "2",
            "-w", f"poisson:n={n}:rate=0.05", "-w", f"poisson:n={n + 1}:rate=0.05",
            "-p", "fifo", "-c", "4x8",
        ],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    lines = done.stderr.splitlines()
    assert lines[0] == f"simulate: 2 runs of up to {n + 1:,} jobs; as each run ends"
    ended = sorted(line.split(": done in ")[0] for line in lines[1:3])
    assert ended == [f"simulate: poisson-{n} / fifo", f"simulate: poisson-{n + 1} / fifo"]
    assert lines[1].endswith("(1 of 2 runs)") and lines[2].endswith("(2 of 2 runs)")
    # The table keeps run_all's order (workload, then policy), whatever order they ended in.
    rows = [line for line in done.stdout.splitlines() if "poisson-" in line]
    assert f"poisson-{n} " in rows[0] and f"poisson-{n + 1} " in rows[1]
