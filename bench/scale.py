"""Cluster scale: one real server and N lightweight agents on the real wire.

For each database (PostgreSQL, then SQLite) and each N in `--hosts`:

1. a real `schedulearn server` process starts (a throwaway PostgreSQL of
   its own, `cli.localpostgres`, or an SQLite file), policy fifo;
2. `--jobs` jobs of 1-8 GPUs are queued (before any node joins: the API
   alone), their sizes and durations drawn from the Philly trace (seeded)
   and scaled so that their GPU-time is `--drain` seconds of the whole
   cluster (each job `sleep SECONDS`);
3. N nodes are enrolled (each its own join token) and served by
   `--procs` worker processes of lightweight agents (bench/scale_agents.py:
   the agent's own client and protocol models, each node its own
   credential; heartbeats, work polls, start/exit events, log batches);
4. after all N have registered and `--warmup` seconds, a fixed window of
   `--window` seconds is measured while a probe client submits one job
   every 0.25 s and lists jobs (`GET /api/v1/jobs`, what `schedulearn
   jobs` asks) every 0.5 s.

`--idle-only` queues nothing and measures instead the idle cluster's cost
(`--idle` seconds of heartbeats and long polls alone): the server's CPU
per node-second and the heartbeat round trip.

Printed per N: the server's CPU share (and PostgreSQL's), submission and
listing p50/p99, heartbeat round trip p50/p99, scheduling pass p50/p99
(the server's own `schedulearn_scheduler_pass_seconds` histogram, over
the window), time from a GPU freeing (its job's exit report going out)
to the next assignment naming it (p50/p99), jobs finished, database
growth, nodes marked down, and the agents' own event-loop lag (a slow
client inflates the round trips it measures). The machine and its load
with the speed probe (bench/machine.py) are printed before each N.
`--json PATH` writes every figure; `--until-done` waits after the window
for every job to end (the integration test's tiny run). Asserts nothing.
Goals at 1,000 hosts on a 2-core machine: submission and listing p99 <=
100 ms, heartbeat p99 <= 200 ms, free-to-start p99 <= 2 s, no live node
marked down.

    uv run python bench/scale.py --hosts 100,300,1000 --database postgresql,sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import dataclasses
import json
import multiprocessing
import os
import random
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import scale_agents
from machine import CpuMeter, describe, speed_line
from rawhttp import Connection, HttpError
from scale_figures import Figures, db_size, pct, postgres_cpu, scrape, troubles

from schedulearn.cli.localcluster import ServerProcess, ctrl_c_held
from schedulearn.cli.localpostgres import LocalPostgres
from schedulearn.protocol import JobState

ADMIN = "scale-admin"
AGENT = "scale-agent"
PHILLY = Path(__file__).resolve().parents[1] / "../shared/traces/philly/philly-jobs.csv"
SUCCEEDED = f"/api/v1/jobs?state={JobState.SUCCEEDED.value}&limit=1"
FINAL = "/api/v1/jobs?" + "&".join(f"state={s.value}" for s in JobState if s.is_final) + "&limit=1"


def philly_jobs(n: int, seed: int) -> list[tuple[int, float]]:
    """`n` (GPUs, seconds) drawn from Philly's jobs of 1-8 GPUs (seeded)."""
    with PHILLY.resolve().open() as f:
        rows = [(int(r["num_gpus"]), max(1.0, float(r["duration"]))) for r in csv.DictReader(f)]
    rows = [r for r in rows if 1 <= r[0] <= 8]
    return random.Random(seed).choices(rows, k=n)


def scaled(jobs: list[tuple[int, float]], gpus: int, drain: float) -> tuple[list[float], float]:
    """Durations scaled so the jobs' GPU-time is `drain` seconds of `gpus` GPUs, each
    kept within [0.2 s, drain / 3] (Philly's tail runs for weeks); and the factor."""
    factor = drain * gpus / sum(g * d for g, d in jobs)
    return [min(max(d * factor, 0.2), drain / 3) for _, d in jobs], factor


async def submit_all(url: str, bodies: list[dict[str, Any]], clients: int = 64) -> None:
    # Many at once: the server records concurrent submissions in one transaction.
    conns = [Connection(url, ADMIN) for _ in range(clients)]
    queue = list(reversed(bodies))

    async def one(conn: Connection) -> None:
        while queue:
            await conn.json("POST", "/api/v1/jobs", queue.pop())

    try:
        await asyncio.gather(*(one(c) for c in conns))
    finally:
        for c in conns:
            c.close()


async def enrol_all(url: str, names: list[str]) -> list[str]:
    conn = Connection(url, ADMIN)
    try:
        return [
            (await conn.json("POST", "/api/v1/nodes", {"name": n}))["join_token"] for n in names
        ]
    finally:
        conn.close()


async def probe(url: str, until: float) -> tuple[list[float], list[float]]:
    """Submission and listing latencies (seconds) until `until` (perf_counter)."""
    submits: list[float] = []
    lists: list[float] = []
    body = {"command": ["sleep", "1"], "gpus": 1, "name": "probe"}

    async def every(period: float, method: str, path: str, data: Any, out: list[float]) -> None:
        conn = Connection(url, ADMIN)
        request = conn.request_bytes(method, path, data)
        try:
            while (now := time.perf_counter()) < until:
                status, reply = await conn.send(request)
                out.append(time.perf_counter() - now)
                if status >= 400:
                    raise HttpError(status, reply)
                await asyncio.sleep(max(0.0, period - (time.perf_counter() - now)))
        finally:
            conn.close()

    await asyncio.gather(
        every(0.25, "POST", "/api/v1/jobs", body, submits),
        every(0.5, "GET", "/api/v1/jobs", None, lists),
    )
    return submits, lists


async def count_final(url: str, query: str = FINAL) -> int:
    conn = Connection(url, ADMIN)
    try:
        return int((await conn.json("GET", query))["total"])
    finally:
        conn.close()


async def one_run(backend: str, hosts: int, args: argparse.Namespace) -> Figures | dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="sl-scale-"))
    pg = LocalPostgres() if backend == "postgresql" else None
    url = pg.new_database("scale") if pg else f"sqlite:///{root / 'scale.db'}"
    server = ServerProcess(url, root / "server.log", ADMIN, AGENT, env=args.server_env)
    if args.profile:
        wrapper = str(Path(__file__).with_name("profiled_server.py"))
        server.args[1:3] = [wrapper, str(root / f"server-{backend}-{hosts}.prof")]
    stop_flag = multiprocessing.get_context("spawn").Event()
    procs: list[Any] = []
    try:
        print(f"--- {backend}, {hosts} hosts x {args.gpus} GPUs, {args.jobs} queued jobs")
        print(f"machine: {describe()}")
        print(speed_line())
        server.start()
        server.wait_serving()
        jobs = philly_jobs(args.jobs, args.seed)
        seconds, factor = scaled(jobs, hosts * args.gpus, args.drain)
        bodies = [
            {"command": ["sleep", f"{s:.3f}"], "gpus": g, "name": "philly"}
            for (g, _), s in zip(jobs, seconds, strict=True)
        ]
        if not args.idle_only:
            # Before the nodes join: the API alone, so the queue is whole when they do.
            t = time.perf_counter()
            await submit_all(server.url, bodies)
            print(
                f"queued {len(bodies)} jobs in {time.perf_counter() - t:.1f}s; Philly durations "
                f"x {factor:.2e} (the queue is {args.drain:g}s of the cluster's GPU-time), "
                f"scaled mean {sum(seconds) / len(seconds):.2f}s, max {max(seconds):.1f}s"
            )
        names = [f"scale-{i:04d}" for i in range(hosts)]
        tokens = await enrol_all(server.url, names)
        ctx = multiprocessing.get_context("spawn")
        nodes = list(zip(names, tokens, strict=True))
        for k in range(args.procs):
            share = nodes[k :: args.procs]
            result = str(root / f"agents{k}.json")
            p = ctx.Process(
                target=scale_agents.worker,
                args=(server.url, share, args.gpus, stop_flag, result),
                daemon=True,
            )
            p.start()
            procs.append((p, result))
        t = time.perf_counter()
        while (await scrape(server.url)).get('schedulearn_nodes{health="up"}', 0) < hosts:
            if time.perf_counter() - t > 300:
                raise TimeoutError(f"not all {hosts} nodes registered in 300 s")
            await asyncio.sleep(1.0)
        print(f"{hosts} nodes enrolled and registered in {time.perf_counter() - t:.1f}s")
        assert server.popen is not None
        meter = CpuMeter({"server": server.popen.pid})

        if args.idle_only:
            # The idle cluster: heartbeats and long polls alone, nothing queued.
            await asyncio.sleep(3.0)
            meter.start()
            idle0 = time.time()
            await asyncio.sleep(args.idle)
            idle = (idle0, time.time())
            idle_cpu = meter.spent()["server"] / (idle[1] - idle[0])
            print(f"idle cluster: the server used {idle_cpu:.2f} of a core")
            stop_flag.set()
            return await idle_figures(backend, hosts, idle, idle_cpu, procs, server.url)

        await asyncio.sleep(args.warmup)

        pg_cpu0 = postgres_cpu(pg) if pg else 0.0
        before, size0 = await scrape(server.url), db_size(url)
        final0 = await count_final(server.url)
        meter.start()
        w0, t0 = time.time(), time.perf_counter()
        submits, lists = await probe(server.url, t0 + args.window)
        elapsed, w1 = time.perf_counter() - t0, time.time()
        cpu = meter.spent()["server"]
        pg_share = ((postgres_cpu(pg) - pg_cpu0) / elapsed) if pg else None
        after, size1 = await scrape(server.url), db_size(url)
        final1 = await count_final(server.url)
        load = os.getloadavg()
        if args.until_done:
            total = len(bodies) + len(submits)
            t = time.perf_counter()
            while await count_final(server.url) < total:
                if time.perf_counter() - t > args.drain * 4 + 60:
                    raise TimeoutError("the jobs did not all end")
                await asyncio.sleep(0.5)
        ended = await count_final(server.url)
        succeeded = await count_final(server.url, SUCCEEDED)
        down = (await scrape(server.url)).get('schedulearn_nodes{health="down"}', 0)
        stop_flag.set()
        samples = []
        for p, result in procs:
            p.join(timeout=60)
            samples.append(json.loads(Path(result).read_text()))
        figures = Figures.of(
            backend, hosts, args, (w0, w1), elapsed, cpu, pg_share, submits, lists,
            (before, after), (size0, size1), final1 - final0, samples, down, load,
            (ended, succeeded, len(bodies) + len(submits)),
        )  # fmt: skip
        seen = troubles(url, root / "server.log")
        return dataclasses.replace(
            figures,
            lost_runs=seen["lost_runs"],
            ledger_refusals=seen["ledger_refusals"],
            server_errors=seen["server_errors"],
        )
    finally:
        stop_flag.set()
        with ctrl_c_held():
            for p, _ in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
            server.stop()
            if pg is not None:
                pg.remove()
        if args.keep:
            print(f"logs in {root}")


async def idle_figures(
    backend: str,
    hosts: int,
    idle: tuple[float, float],
    cpu: float,
    procs: list[Any],
    url: str,
) -> dict[str, Any]:
    """`--idle-only`: the idle cluster's figures (heartbeats and polls alone)."""
    down = (await scrape(url)).get('schedulearn_nodes{health="down"}', 0)
    beats: list[float] = []
    for p, result in procs:
        p.join(timeout=60)
        beats += [
            s
            for t, s in json.loads(Path(result).read_text())["heartbeat"]
            if idle[0] <= t <= idle[1]
        ]
    return {
        "database": backend,
        "hosts": hosts,
        "idle_cpu_share": cpu,
        "cpu_ms_per_node_second": cpu / hosts * 1000,
        "idle_heartbeat_p99_ms": pct(beats, 0.99) * 1000,
        "nodes_down": int(down),
        "load": os.getloadavg(),
    }


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hosts", default="100,300,1000", help="comma-separated N")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per host")
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--database", default="postgresql,sqlite", help="postgresql and/or sqlite")
    p.add_argument("--procs", type=int, default=4, help="agent worker processes")
    p.add_argument("--drain", type=float, default=150.0, help="queue GPU-time in cluster-seconds")
    p.add_argument("--idle", type=float, default=10.0, help="seconds measured before the queue")
    p.add_argument("--idle-only", action="store_true", help="measure the idle cluster alone")
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--window", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--until-done", action="store_true", help="wait for every job to end")
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    p.add_argument("--profile", action="store_true", help="the server under yappi (with --keep)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="a server setting, e.g. heartbeat_flush_seconds=0 (each heartbeat in its own "
        "transaction, as before the group commit); repeatable",
    )
    args = p.parse_args()
    args.server_env = {"SCHEDULEARN_DEFAULT_POLICY": "fifo"}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or not name:
            p.error(f"--set {item!r}: give SETTING=VALUE, e.g. heartbeat_flush_seconds=0")
        args.server_env[f"SCHEDULEARN_{name.upper()}"] = value
    results = []
    for backend in args.database.split(","):
        for hosts in (int(h) for h in args.hosts.split(",")):
            try:
                figures = await one_run(backend, hosts, args)
            except (TimeoutError, HttpError, OSError) as exc:
                # One N that collapses says so; the curve goes on.
                print(f"  {backend}, {hosts} hosts: no figures: {exc!r}")
                continue
            if isinstance(figures, dict):
                print(f"  {figures}")
                results.append(figures)
                continue
            print(figures.render())
            results.append(figures.as_dict())
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    if len(results) > 1 and not args.idle_only:
        print(Figures.curve(results))


def _interrupted(*_: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up as Ctrl-C does: servers and agents stopped


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupted)
    asyncio.run(main())
