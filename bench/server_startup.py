"""How long `schedulearn server` takes from exec to answering /healthz (issue 14, item 8).

Starts the server as a real process several times on one SQLite file: the
first start creates and migrates the database, the later ones find it at
the newest revision (the common case: a restart). For each start it
prints the wall time until the first 200 from /healthz (the server
listens before it loads the app: `server/startup.py`), the CPU time the
process spent by then (which competition for the CPUs barely changes),
and the wall time until /readyz says the app is up, then the slowest
imports on the path to listening (`python -X importtime`). Goal (issue 14):
a restart answers /healthz within 2 s on the 2-core development machine.
Asserts nothing.

    uv run python bench/server_startup.py [--starts 5] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from machine import describe, speed_line

from schedulearn.cli.freeports import free_port

_CLK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


def one_start(database_url: str, log: Path) -> tuple[float, float, float]:
    """(wall s, CPU s) from exec until /healthz answers 200, and wall s until /readyz does."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    env.update(
        SCHEDULEARN_DATABASE_URL=database_url,
        SCHEDULEARN_ADMIN_TOKEN="bench-admin",
        SCHEDULEARN_AGENT_TOKEN="bench-agent",
        SCHEDULEARN_PRINT_TOKENS="false",
        SCHEDULEARN_LOG_LEVEL="warning",
    )
    url = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "schedulearn.cli.main", "server", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        live = _first_200(proc, f"{url}/healthz", log)
        cpu = _cpu(proc.pid)
        ready = _first_200(proc, f"{url}/readyz", log)
        return live - started, cpu, ready - started
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _first_200(proc: subprocess.Popen[bytes], url: str, log: Path) -> float:
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return time.perf_counter()
        except httpx.HTTPError:
            pass
        time.sleep(0.01)


def slowest_imports(count: int = 12) -> list[tuple[float, str]]:
    """The modules with the largest cumulative import time on the start-up path."""
    code = "import schedulearn.cli.main, schedulearn.cli.serving, schedulearn.server.startup"
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True
    )
    rows = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        depth = len(name) - len(name.lstrip())
        if depth <= 3:  # top-level imports and their direct children
            rows.append((int(cumulative) / 1e6, name.strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--postgres", help="a PostgreSQL URL to use instead of a new SQLite file")
    args = parser.parse_args()
    print(f"machine: {describe()}")
    print(speed_line())
    with tempfile.TemporaryDirectory() as tmp:
        url = args.postgres or f"sqlite:///{Path(tmp) / 'bench.db'}"
        log = Path(tmp) / "server.log"
        first = one_start(url, log)
        print(f"first start (creates and migrates the database): /healthz {first[0]:.2f} s "
              f"wall, {first[1]:.2f} s CPU; /readyz {first[2]:.2f} s wall")  # fmt: skip
        walls, cpus, readies = [], [], []
        for _ in range(args.starts):
            wall, cpu, ready = one_start(url, log)
            walls.append(wall)
            cpus.append(cpu)
            readies.append(ready)
        median = statistics.median(walls)
        print(
            f"restart to /healthz over {args.starts} starts: median {median:.2f} s "
            f"wall (min {min(walls):.2f}, max {max(walls):.2f}), median "
            f"{statistics.median(cpus):.2f} s CPU (goal: < 2 s wall); /readyz (app loaded, "
            f"scheduler running): median {statistics.median(readies):.2f} s wall"
        )
    print("slowest imports on the path to listening (cumulative seconds):")
    for seconds, name in slowest_imports():
        print(f"  {seconds:6.2f}  {name}")


if __name__ == "__main__":
    main()
