"""API load benchmark: submissions/s, finished jobs/s and submit-to-running latency.

Starts a real `schedulearn server` (SQLite in a temp dir, or the URL given
with --database-url) and two agents with virtual GPUs, as processes on
127.0.0.1, then measures over HTTP:

1. submissions/s: `--submissions` single-job submissions from `--clients`
   concurrent keep-alive connections (each reply means the job is
   committed; the client is the lean one in bench/rawhttp.py), before
   the agents join, so the figure is the API's alone; the agents then
   start and drain that queue (also printed);
2. finished jobs/s: `--jobs` trivial jobs (`true`) submitted at once,
   from the first submission until the last one has ended;
3. submit-to-running latency: `--latency-jobs` jobs submitted one at a
   time to an idle cluster; the server's `started_at - submitted_at`
   (both from the server's clock), p50 and p99.

Prints the figures, the CPU time the server, the agents and the agents'
jobs (their `sh` shims) spent per submission and per finished job (which
competition for the CPUs barely changes, unlike the rates), and the
machine with a single-core speed figure (bench/machine.py), so that runs
on two machines can be compared; asserts nothing. Goals on a 2-core
machine: 1,000 submissions/s, 500 finished jobs/s, p50 latency <= 20 ms.

    uv run python bench/api_load.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from machine import CpuMeter, describe, speed_line
from rawhttp import Connection, HttpError

from schedulearn.cli.localcluster import AgentProcess, ServerProcess, ctrl_c_held
from schedulearn.protocol import JobState

ADMIN = "bench-admin"
AGENT = "bench-agent"


async def submit_many(url: str, n: int, clients: int, body: dict) -> tuple[float, list[int]]:
    """`n` single-job submissions from `clients` keep-alive connections."""
    conns = [Connection(url, ADMIN) for _ in range(clients)]
    request = conns[0].request_bytes("POST", "/api/v1/jobs", body)
    ids: list[int] = []
    left = n

    async def worker(conn: Connection) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            status, data = await conn.send(request)
            if status != 201:
                raise HttpError(status, data)
            ids.extend(json.loads(data)["ids"])

    start = time.perf_counter()
    try:
        await asyncio.gather(*(worker(conn) for conn in conns))
    finally:
        for conn in conns:
            conn.close()
    return time.perf_counter() - start, ids


async def wait_ready(url: str, timeout: float = 120.0) -> None:
    """Wait for /readyz: /healthz answers while the app is still being
    imported and migrated, which would otherwise be timed (and its CPU
    counted) as the first submissions'."""
    conn = Connection(url, ADMIN)
    deadline = time.perf_counter() + timeout
    try:
        while time.perf_counter() < deadline:
            status, _ = await conn.send(conn.request_bytes("GET", "/readyz"))
            if status == 200:
                return
            await asyncio.sleep(0.05)
    finally:
        conn.close()
    raise TimeoutError(f"the server was not ready in {timeout}s")


ENDED = tuple(s.value for s in JobState if s.is_final)
FINAL = "/api/v1/jobs?" + "&".join(f"state={s}" for s in ENDED) + "&limit=1"


async def count_final(url: str) -> int:
    """How many jobs have ended. The listed job is a final one, so the server
    forecasts nothing for this poll (a listing with an active job would run
    the predictions' simulation of the whole queue, 20 times a second)."""
    conn = Connection(url, ADMIN)
    try:
        return int((await conn.json("GET", FINAL))["total"])
    finally:
        conn.close()


async def wait_all_final(url: str, ids: list[int], before: int, timeout: float) -> float:
    """Poll until `ids` have all ended (`before` jobs had ended before they were
    submitted); returns when that happened."""
    conn = Connection(url, ADMIN)
    deadline = time.perf_counter() + timeout
    try:
        while time.perf_counter() < deadline:
            if (await conn.json("GET", FINAL))["total"] - before >= len(ids):
                return time.perf_counter()
            await asyncio.sleep(0.05)
    finally:
        conn.close()
    raise TimeoutError(f"{len(ids)} jobs did not all end in {timeout}s")


async def latency(url: str, n: int) -> tuple[list[float], list[float]]:
    """Each job's `started_at - submitted_at`, both from the server's clock, and
    the part of it spent before the job was assigned (submission and
    scheduling pass; the rest is the handout, the agent's start and its
    `started` report), from the job's history.

    Jobs go one at a time to an idle cluster. The client stays off the path
    it measures: after each submission it waits `QUIET` (longer than the
    whole path takes), and only then reads the job, every `QUIET` again until
    it has ended. Polling while the job starts (the last pass listed the
    ended jobs every 10 ms) put each request's few milliseconds of the
    server's event loop and database thread in the way of the start."""
    conn = Connection(url, ADMIN)
    out: list[float] = []
    to_assigned: list[float] = []
    try:
        for _ in range(n):
            reply = await conn.json("POST", "/api/v1/jobs", {"command": ["true"], "gpus": 1})
            job_id = reply["ids"][0]
            while True:
                await asyncio.sleep(QUIET)
                j = await conn.json("GET", f"/api/v1/jobs/{job_id}")
                if j["state"] in ENDED:
                    break
            out.append(j["started_at"] - j["submitted_at"])
            history = await conn.json("GET", f"/api/v1/jobs/{job_id}/history")
            assigned = next(t["at"] for t in history["transitions"] if t["to_state"] == "assigned")
            to_assigned.append(assigned - j["submitted_at"])
    finally:
        conn.close()
    return out, to_assigned


QUIET = 0.1  # seconds the latency phase leaves the server alone after each submission


def cpu_per(spent: dict[str, float], n: int) -> str:
    """CPU milliseconds per item, per process and in all."""
    parts = [f"{name} {cpu / n * 1000:.2f}" for name, cpu in spent.items()]
    return f"CPU ms {sum(spent.values()) / n * 1000:.2f} ({', '.join(parts)})"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--submissions", type=int, default=3000)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--latency-jobs", type=int, default=200)
    p.add_argument("--gpus-per-agent", type=int, default=32)
    p.add_argument("--database-url", default=None)
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    args = p.parse_args()

    root = Path(tempfile.mkdtemp(prefix="sl-bench-"))
    db = args.database_url or f"sqlite:///{root / 'bench.db'}"
    server = ServerProcess(db, root / "server.log", ADMIN, AGENT)
    agents = [
        AgentProcess(
            server.url, "", f"bench{i}", args.gpus_per_agent, root / f"agent{i}.log",
            root / f"state{i}", extra=["--workdir", str(root), "--log-level", "warning"],
        )
        for i in range(2)
    ]  # fmt: skip
    server.start()
    try:
        server.wait_ready()
        await wait_ready(server.url)
        print(f"machine: {describe()}")
        print(speed_line())
        print(f"database: {db.split(':')[0]}; 2 agents x {args.gpus_per_agent} virtual GPUs")
        assert server.popen is not None
        meter = CpuMeter({"server": server.popen.pid, "bench client": os.getpid()})

        # 1. Submissions per second: the API and the database alone (the
        # agents join afterwards, so nothing else competes for the CPUs).
        body = {"command": ["true"], "gpus": 1}
        meter.start()
        elapsed, ids = await submit_many(server.url, args.submissions, args.clients, body)
        print(
            f"submissions: {len(ids)} in {elapsed:.2f}s = {len(ids) / elapsed:.0f} submissions/s "
            f"({args.clients} concurrent clients); "
            f"{cpu_per(meter.spent(), len(ids))} per submission"
        )
        for a in agents:
            a.enroll(server)  # each node its own credential
            a.start()
        start = time.perf_counter()
        conn = Connection(server.url, ADMIN)
        while len((await conn.json("GET", "/api/v1/nodes"))["items"]) < 2:
            await asyncio.sleep(0.1)
        conn.close()
        end = await wait_all_final(server.url, ids, 0, timeout=600)
        print(
            f"  the agents then drained that queue in {end - start:.2f}s "
            f"(including their start-up) = {len(ids) / (end - start):.0f} jobs/s"
        )

        # 2. Finished jobs per second.
        for i, a in enumerate(agents):
            assert a.popen is not None
            meter.pids[f"agent{i}"] = meter.pids[f"agent{i}'s jobs"] = a.popen.pid
            meter.reaped.add(f"agent{i}'s jobs")
        before = await count_final(server.url)
        meter.start()
        start = time.perf_counter()
        _, ids = await submit_many(server.url, args.jobs, args.clients, body)
        end = await wait_all_final(server.url, ids, before, timeout=600)
        print(
            f"finished: {len(ids)} trivial jobs in {end - start:.2f}s = "
            f"{len(ids) / (end - start):.0f} finished jobs/s; "
            f"{cpu_per(meter.spent(), len(ids))} per job"
        )

        # 3. Submit-to-running latency on an idle cluster.
        lat, to_assigned = await latency(server.url, args.latency_jobs)
        print(
            f"submit-to-running latency over {len(lat)} jobs: p50 {pct(lat, 0.5) * 1000:.1f} ms, "
            f"p99 {pct(lat, 0.99) * 1000:.1f} ms, mean {statistics.mean(lat) * 1000:.1f} ms; "
            f"of which submitted -> assigned p50 {pct(to_assigned, 0.5) * 1000:.1f} ms"
        )
    finally:
        with ctrl_c_held():
            for a in agents:
                a.stop(timeout=10)
            server.stop()
        if args.keep:
            print(f"logs in {root}")


if __name__ == "__main__":
    asyncio.run(main())
