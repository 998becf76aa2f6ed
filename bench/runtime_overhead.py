"""What the runtime library costs a training loop: ns per `report()` and `should_stop()` call.

Three cases: no agent (SCHEDULEARN_PROGRESS_FILE unset, the call returns
at once), a rank other than 0 (the call returns at once too), and an
agent's progress file (one JSON line appended and flushed per call). An
empty function call is printed beside them as the floor. Issue 5's goal:
nothing measurable when no agent is there. Nothing is asserted; run it by
hand:

    uv run python bench/runtime_overhead.py
    uv run python bench/runtime_overhead.py --calls 200000
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from schedulearn import runtime


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ns_per_call(fn: Callable[[], None], calls: int, repeats: int = 5) -> float:
    """The best of `repeats` timings, in nanoseconds per call."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best


def empty() -> None:
    pass


def one_report() -> None:
    runtime.report(step=100, epoch=3, loss=0.25, accuracy=0.9, samples_per_sec=1234.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100_000, help="calls per timing [100000]")
    args = parser.parse_args()
    for name in ("SCHEDULEARN_PROGRESS_FILE", "RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK"):
        os.environ.pop(name, None)
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}")

    rows = [("empty function call (floor)", ns_per_call(empty, args.calls))]
    rows.append(("should_stop()", ns_per_call(runtime.should_stop, args.calls)))
    rows.append(("report(), no agent", ns_per_call(one_report, args.calls)))
    os.environ["RANK"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SCHEDULEARN_PROGRESS_FILE"] = str(Path(tmp) / "progress.jsonl")
        rows.append(("report(), agent, rank 1", ns_per_call(one_report, args.calls)))
        del os.environ["RANK"]
        file_calls = max(1, args.calls // 10)  # each call writes a line: fewer of them
        rows.append(("report(), agent's progress file", ns_per_call(one_report, file_calls)))
        lines = Path(os.environ["SCHEDULEARN_PROGRESS_FILE"]).read_text().count("\n")
    for label, ns in rows:
        print(f"{label:34s} {ns:10.0f} ns/call")
    print(f"(progress file lines written: {lines})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
