"""How long `/healthz` takes while 1,000 job listings are in flight (issue 33).

Starts a real `schedulearn server` (SQLite in a temporary folder, or
`--database-url`), submits `--jobs` jobs, then opens `--listings`
connections that each ask for a page of 100 jobs at once, and while they
are in flight asks `/healthz` every 50 ms on a connection of its own, from
a process of its own. Prints the slowest and median `/healthz` time and the
machine. Goal: under 0.5 s.

    uv run python bench/healthz_under_load.py [--listings 1000] [--jobs 300]
"""

from __future__ import annotations

import argparse
import asyncio
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

ADMIN = "bench-admin-token-0123456789abcdef"


async def _listings(url: str, count: int, in_flight: list[int]) -> float:
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(
        base_url=url,
        headers={"Authorization": f"Bearer {ADMIN}"},
        limits=limits,
        timeout=300,
    ) as http:

        async def one() -> None:
            in_flight[0] += 1
            try:
                r = await http.get("/api/v1/jobs", params={"limit": 100})
                r.raise_for_status()
            finally:
                in_flight[0] -= 1

        started = time.monotonic()
        await asyncio.gather(*(one() for _ in range(count)))
        return time.monotonic() - started


# The probe runs in a process of its own: in the same event loop as the
# listings' client, it measured that client's own backlog, not the server's.
_PROBE = """
import http.client, sys, time
port, stop = int(sys.argv[1]), sys.argv[2]
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
import os
while not os.path.exists(stop):
    started = time.monotonic()
    conn.request("GET", "/healthz")
    reply = conn.getresponse()
    reply.read()
    assert reply.status == 200, reply.status
    print(f"{started:.4f} {time.monotonic() - started:.4f}", flush=True)
    time.sleep(0.05)
"""


async def _run(url: str, port: int, listings: int, folder: Path) -> tuple[float, list[float]]:
    in_flight = [0]
    stop = folder / "stop"
    probe = subprocess.Popen(
        [sys.executable, "-c", _PROBE, str(port), str(stop)], stdout=subprocess.PIPE, text=True
    )
    await asyncio.sleep(0.5)
    first = time.monotonic()
    wall = await _listings(url, listings, in_flight)
    last = time.monotonic()
    stop.touch()
    out, _ = probe.communicate(timeout=120)
    seen = []
    pairs = out.split()
    for at, took in zip(pairs[::2], pairs[1::2], strict=True):
        if first <= float(at) <= last:
            seen.append(float(took))
            if float(took) > 0.5:
                print(f"  slow /healthz asked {float(at) - first:.1f} s in: {float(took):.2f} s")
    return wall, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listings", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--reads", type=int, default=None, help="max_concurrent_reads")
    args = parser.parse_args()
    print(describe())
    print(speed_line())
    folder = Path(tempfile.mkdtemp(prefix="sl-bench-healthz-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    env.update(
        SCHEDULEARN_DATABASE_URL=args.database_url or f"sqlite:///{folder / 'db.sqlite'}",
        SCHEDULEARN_ADMIN_TOKEN=ADMIN,
        SCHEDULEARN_PRINT_TOKENS="false",
        SCHEDULEARN_LOG_LEVEL="warning",
    )
    if args.reads is not None:
        env["SCHEDULEARN_MAX_CONCURRENT_READS"] = str(args.reads)
    with (folder / "server.log").open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "schedulearn.cli.main", "server", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit((folder / "server.log").read_text())
            time.sleep(0.2)
        for _ in range(args.jobs // 50):
            r = httpx.post(
                f"{url}/api/v1/jobs",
                json={"command": ["true"], "gpus": 0, "count": 50},
                headers=headers,
                timeout=60,
            )
            r.raise_for_status()
        wall, seen = asyncio.run(_run(url, port, args.listings, folder))
    finally:
        server.terminate()
        server.wait(timeout=30)
    times = sorted(seen)
    print(f"{args.listings} listings of 100 jobs ({args.jobs} in the database) took {wall:.2f} s")
    if not times:
        print("no /healthz was asked while listings were in flight")
        return
    print(
        f"/healthz while the listings were in flight: {len(times)} asked, median "
        f"{statistics.median(times) * 1000:.0f} ms, slowest {times[-1] * 1000:.0f} ms "
        "(goal: under 500 ms)"
    )


if __name__ == "__main__":
    main()
