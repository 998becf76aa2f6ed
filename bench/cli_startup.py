"""How long `schedulearn` commands take to answer, against bare Python.

Prints the median wall time of `schedulearn --version`, `jobs`, `whoami`
and `simulate --help` (each a fresh process, as a user types it) and of
`python -c pass`, and whether each command meets the goal of issue 15:
at most 0.3 s, and within 0.2 s of bare Python. `jobs` and `whoami` talk
to a real server started here (SQLite in a temporary directory), so the
figure includes the HTTP call. Figures, no assertions (DESIGN.md: bench/).

Python's bytecode cache is on, as for a user (pip writes it at install,
Python on first import): the commands write it under a temporary
`PYTHONPYCACHEPREFIX`, whatever PYTHONDONTWRITEBYTECODE says here, and the
source tree is left alone. `--no-bytecode-cache` measures every run
compiling every module from source instead (the worst case).

    uv run python bench/cli_startup.py [--runs 15] [--no-bytecode-cache]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from schedulearn.cli.localcluster import ServerProcess, ctrl_c_held

GOAL_SECONDS = 0.3
GOAL_OVER_PYTHON = 0.2
TOKEN = "bench-cli-admin"


def _script() -> list[str]:
    """The installed console script, as a user runs it (else the same entry point)."""
    found = shutil.which("schedulearn", path=str(Path(sys.executable).parent))
    if found:
        return [found]
    return [sys.executable, "-c", "from schedulearn.cli.entry import main; main()"]


def median_seconds(argv: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr.decode()[-2000:]}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs per command (median)")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="compile every module from source on every run (PYTHONDONTWRITEBYTECODE=1)",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = ServerProcess(
            f"sqlite:///{root / 'bench.db'}", root / "server.log", TOKEN, "bench-agent"
        )
        server.start()
        try:
            server.wait_ready(timeout=120)
            env = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith("SCHEDULEARN_")
                and k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
            }
            if args.no_bytecode_cache:
                env["PYTHONDONTWRITEBYTECODE"] = "1"
            else:
                env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
            env.update(
                SCHEDULEARN_SERVER=server.url,
                SCHEDULEARN_TOKEN=TOKEN,
                SCHEDULEARN_CONFIG=str(root / "cli.json"),
            )
            script = _script()
            # One call of each first: the server's first requests are slow, and
            # the bytecode cache is written (a user's second command finds it).
            for command in (["jobs"], ["whoami"], ["simulate", "--help"], ["--version"]):
                median_seconds([*script, *command], env, 1)
            bare = median_seconds([sys.executable, "-c", "pass"], env, args.runs)
            rows = [("python -c pass", bare)]
            for command in (["--version"], ["jobs"], ["whoami"], ["simulate", "--help"]):
                rows.append(
                    (
                        f"schedulearn {' '.join(command)}",
                        median_seconds([*script, *command], env, args.runs),
                    )
                )
        finally:
            with ctrl_c_held():
                server.stop()

    cpu = platform.processor() or platform.machine()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {load:.2f}; median of {args.runs} runs each; bytecode cache "
        + ("off" if args.no_bytecode_cache else "on")
    )
    print(
        f"{'command':<28} {'median s':>9} {'over python':>12}  goal (<= {GOAL_SECONDS} s, "
        f"<= +{GOAL_OVER_PYTHON} s)"
    )
    for name, seconds in rows:
        over = seconds - bare
        met = seconds <= GOAL_SECONDS and over <= GOAL_OVER_PYTHON
        verdict = "" if name.startswith("python") else ("met" if met else "NOT met")
        print(f"{name:<28} {seconds:>9.3f} {over:>+12.3f}  {verdict}")


if __name__ == "__main__":
    main()
