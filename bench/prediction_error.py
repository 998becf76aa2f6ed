"""Prediction error benchmark: predicted against actual start (and end) times, live.

Starts a real `schedulearn server` (SQLite in a temp dir) and `--agents`
agents of `--gpus` virtual GPUs as processes on 127.0.0.1, for each
policy in `--policy`. Jobs arrive in `--bursts` bursts every
`--every` seconds; each is `sleep D` with `estimated_duration: E`, where
E is drawn from 1..`--longest` seconds and D = E x (1 + U(-noise, +noise))
(`--noise 0`: the estimates are exact, so what remains is the error the
forecast itself makes: launch, exit reporting and scheduling latency
that it does not model, and the arrivals it cannot foresee).

Right after each burst it reads every job's predicted start and end (the
first prediction a user would see after submitting), waits until all
jobs end, and prints the mean, median, p90 and max absolute error of the
predicted start times of the jobs that had to wait, and of the predicted
end times. Prints the figures and the machine; asserts nothing.

    uv run python bench/prediction_error.py
    uv run python bench/prediction_error.py --policy fifo,srtf --jobs 80 --noise 0.2
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from schedulearn.cli.client import Client
from schedulearn.cli.localcluster import AgentProcess, ServerProcess, ctrl_c_held
from schedulearn.protocol import JobSpec

ADMIN = "bench-admin"
AGENT = "bench-agent"
FINAL = {"succeeded", "failed", "cancelled", "lost"}


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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class Outcome:
    policy: str
    jobs: int
    waited: int
    start_errors: list[float]
    end_errors: list[float]
    wall: float
    waits: list[float]


def run_policy(policy: str, args: argparse.Namespace, root: Path) -> Outcome:
    rng = random.Random(args.seed)
    server = ServerProcess(
        f"sqlite:///{root / 'server.db'}",
        root / "server.log",
        ADMIN,
        AGENT,
        env={"SCHEDULEARN_DEFAULT_POLICY": policy, "SCHEDULEARN_HEARTBEAT_SECONDS": "0.5"},
    )
    agents = [
        AgentProcess(
            server.url,
            "",
            f"n{i}",
            args.gpus,
            root / f"agent{i}.log",
            root / f"state{i}",
            extra=["--workdir", str(root), "--stop-jobs-on-exit"],
        )
        for i in range(args.agents)
    ]
    started = time.time()
    server.start()
    try:
        server.wait_ready()
        for agent in agents:
            agent.enroll(server)  # each node its own credential
            agent.start()
        with Client(server.url, ADMIN) as client:
            while sum(n.healthy for n in client.nodes().items) < args.agents:
                time.sleep(0.1)
            return _drive(client, policy, rng, args, started)
    finally:
        with ctrl_c_held():
            for agent in agents:
                agent.stop(timeout=15)
            server.kill()


def _drive(
    client: Client, policy: str, rng: random.Random, args: argparse.Namespace, started: float
) -> Outcome:
    predicted_start: dict[int, float | None] = {}
    predicted_end: dict[int, float | None] = {}
    waits: list[float] = []
    ids: list[int] = []
    per_burst = max(1, args.jobs // args.bursts)
    sizes = [g for g in (1, 1, 2, 2, 4, 8) if g <= args.gpus]
    for burst in range(args.bursts):
        burst_at = time.time()
        fresh = []
        for i in range(per_burst):
            estimate = rng.randint(1, args.longest)
            actual = max(0.1, estimate * (1 + rng.uniform(-args.noise, args.noise)))
            spec = JobSpec(
                name=f"b{burst}-{i}",
                command=f"sleep {actual:.2f}",
                gpus=rng.choice(sizes),
                estimated_duration=float(estimate),
            )
            fresh += client.submit(spec).ids
        listing = client.jobs(limit=1000)
        for job in listing.items:
            if job.id in fresh:
                if job.state == "pending":
                    predicted_start[job.id] = job.predicted_start_at
                    if job.predicted_start_at is not None:
                        waits.append(job.predicted_start_at - job.submitted_at)
                predicted_end[job.id] = job.predicted_end_at
        ids += fresh
        if burst + 1 < args.bursts:
            time.sleep(max(0.0, burst_at + args.every - time.time()))
    done: dict[int, tuple[float | None, float | None]] = {}
    deadline = time.time() + args.timeout
    while len(done) < len(ids) and time.time() < deadline:
        for job in client.jobs(limit=1000).items:
            if job.id in ids and job.state in FINAL:
                done[job.id] = (job.started_at, job.ended_at)
        time.sleep(0.3)
    start_errors = [
        abs(done[j][0] - p)  # type: ignore[operator]
        for j, p in predicted_start.items()
        if p is not None and j in done and done[j][0] is not None
    ]
    end_errors = [
        abs(done[j][1] - p)  # type: ignore[operator]
        for j, p in predicted_end.items()
        if p is not None and j in done and done[j][1] is not None
    ]
    return Outcome(policy, len(ids), len(predicted_start), start_errors, end_errors,
                   time.time() - started, waits)  # fmt: skip


def line(name: str, errors: list[float]) -> str:
    if not errors:
        return f"  {name}: no predictions"
    return (
        f"  {name} error over {len(errors)} jobs: mean {statistics.fmean(errors):.2f} s, "
        f"median {percentile(errors, 50):.2f} s, p90 {percentile(errors, 90):.2f} s, "
        f"max {max(errors):.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="fifo,srtf", help="comma-separated specs")
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--every", type=float, default=15.0, help="seconds between bursts")
    parser.add_argument("--longest", type=int, default=6, help="longest estimate, seconds")
    parser.add_argument("--noise", type=float, default=0.0, help="actual/estimate spread")
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=4, help="virtual GPUs per agent")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(
        f"workload: {args.jobs} jobs in {args.bursts} bursts every {args.every:g} s, "
        f"estimates 1..{args.longest} s, noise {args.noise:g}, "
        f"{args.agents} agents x {args.gpus} virtual GPUs"
    )
    for policy in args.policy.split(","):
        with tempfile.TemporaryDirectory(prefix="sl-pred-") as tmp:
            out = run_policy(policy.strip(), args, Path(tmp))
        mean_wait = statistics.fmean(out.waits) if out.waits else 0.0
        print(
            f"{out.policy}: {out.jobs} jobs, {out.waited} waited (predicted wait: mean "
            f"{mean_wait:.1f} s, max {max(out.waits, default=0.0):.1f} s), "
            f"run took {out.wall:.0f} s"
        )
        print(line("predicted start", out.start_errors))
        print(line("predicted end  ", out.end_errors))


if __name__ == "__main__":
    main()
