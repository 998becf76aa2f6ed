"""API load benchmark: submissions/s, finished jobs/s and submit-to-running latency.

Starts a real `schedulearn server` (SQLite in a temp dir, or the URL given
with --database-url) and two agents with virtual GPUs, as processes on
127.0.0.1, then measures over HTTP:

1. submissions/s: `--submissions` single-job submissions from `--clients`
   concurrent connections (each reply means the job is committed), before
   the agents join, so the figure is the API's alone; the agents then
   start and drain that queue (also printed);
2. finished jobs/s: `--jobs` trivial jobs (`true`) submitted at once,
   from the first submission until the last one has ended;
3. submit-to-running latency: `--latency-jobs` jobs submitted one at a
   time to an idle cluster; the server's `started_at - submitted_at`
   (both from the server's clock), p50 and p99.

Prints the figures and the machine; asserts nothing. Goals on a 2-core
machine: 500 submissions/s, 200 finished jobs/s, p50 latency <= 50 ms.

    uv run python bench/api_load.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from schedulearn.cli.localcluster import AgentProcess, ServerProcess

ADMIN = "bench-admin"
AGENT = "bench-agent"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, {platform.system()}"


async def submit_many(url: str, n: int, clients: int, body: dict) -> tuple[float, list[int]]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    ids: list[int] = []
    errors: list[int] = []
    left = n
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60) as http:

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                for _attempt in range(5):
                    try:
                        r = await http.post("/api/v1/jobs", json=body)
                        break
                    except httpx.TransportError:
                        # A keep-alive connection closed under us: send again.
                        errors.append(1)
                else:
                    raise RuntimeError("the server stopped answering")
                r.raise_for_status()
                ids.extend(r.json()["ids"])

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        if errors:
            print(f"  ({len(errors)} requests resent after a dropped connection)")
        return time.perf_counter() - start, ids


async def wait_all_final(url: str, ids: list[int], timeout: float) -> float:
    """Poll the job list until every id is final; returns when that happened."""
    headers = {"Authorization": f"Bearer {ADMIN}"}
    wanted = set(ids)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            r = await http.get(
                "/api/v1/jobs",
                params={"state": ["pending", "assigned", "running", "lost"], "limit": 1},
            )
            if r.json()["total"] == 0:
                return time.perf_counter()
            await asyncio.sleep(0.05)
    raise TimeoutError(f"{len(wanted)} jobs did not all end in {timeout}s")


async def latency(url: str, n: int) -> list[float]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    out: list[float] = []
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
        for _ in range(n):
            r = await http.post("/api/v1/jobs", json={"command": ["true"], "gpus": 1})
            job_id = r.json()["ids"][0]
            while True:
                j = (await http.get(f"/api/v1/jobs/{job_id}")).json()
                if j["started_at"] is not None:
                    out.append(j["started_at"] - j["submitted_at"])
                    break
                await asyncio.sleep(0.002)
            # Let the cluster go idle again, so each job meets an empty queue.
            while (await http.get(f"/api/v1/jobs/{job_id}")).json()["ended_at"] is None:
                await asyncio.sleep(0.005)
    return out


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
            server.url, AGENT, f"bench{i}", args.gpus_per_agent, root / f"agent{i}.log",
            root / f"state{i}", extra=["--workdir", str(root), "--log-level", "warning"],
        )
        for i in range(2)
    ]  # fmt: skip
    server.start()
    try:
        server.wait_ready()
        print(f"machine: {machine()}")
        print(f"database: {db.split(':')[0]}; 2 agents x {args.gpus_per_agent} virtual GPUs")

        # 1. Submissions per second: the API and the database alone (the
        # agents join afterwards, so nothing else competes for the CPUs).
        body = {"command": ["true"], "gpus": 1}
        elapsed, ids = await submit_many(server.url, args.submissions, args.clients, body)
        print(
            f"submissions: {len(ids)} in {elapsed:.2f}s = {len(ids) / elapsed:.0f} submissions/s "
            f"({args.clients} concurrent clients)"
        )
        for a in agents:
            a.start()
        start = time.perf_counter()
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            headers = {"Authorization": f"Bearer {ADMIN}"}
            while len((await http.get("/api/v1/nodes", headers=headers)).json()["items"]) < 2:
                await asyncio.sleep(0.1)
        end = await wait_all_final(server.url, ids, timeout=600)
        print(
            f"  the agents then drained that queue in {end - start:.2f}s "
            f"(including their start-up) = {len(ids) / (end - start):.0f} jobs/s"
        )

        # 2. Finished jobs per second.
        start = time.perf_counter()
        _, ids = await submit_many(server.url, args.jobs, args.clients, body)
        end = await wait_all_final(server.url, ids, timeout=600)
        print(
            f"finished: {len(ids)} trivial jobs in {end - start:.2f}s = "
            f"{len(ids) / (end - start):.0f} finished jobs/s"
        )

        # 3. Submit-to-running latency on an idle cluster.
        lat = await latency(server.url, args.latency_jobs)
        print(
            f"submit-to-running latency over {len(lat)} jobs: p50 {pct(lat, 0.5) * 1000:.1f} ms, "
            f"p99 {pct(lat, 0.99) * 1000:.1f} ms, mean {statistics.mean(lat) * 1000:.1f} ms"
        )
    finally:
        for a in agents:
            a.stop(timeout=10)
        server.stop()
        if args.keep:
            print(f"logs in {root}")


if __name__ == "__main__":
    asyncio.run(main())
