"""Chaos: many small submissions while servers, agents and the database are killed (issue 14).

Starts real processes on 127.0.0.1: with `--backend postgres` (the
default) a throwaway PostgreSQL (initdb as the unprivileged `postgres`
user in a temp dir, on a free port, as the tests' fixtures do) and two
server replicas on it; with `--backend sqlite` one server on an SQLite
file. Then three agents, each given every server address (they fail over
between replicas), and several submitting clients (the CLI's HTTP client,
`schedulearn.cli.client.Client`, given every address; each submission
carries an Idempotency-Key, the same on every retry of it).

While the clients submit, a chaos thread kill -9s at random the leader
replica (the one holding the scheduler lock), a follower replica (with
SQLite: the one server) and agents, restarting each a few seconds later
(a replica is killed only once it is ready again after its last start,
and never the last ready one of two),
and restarts PostgreSQL once (an immediate stop, as a crash would, then a
start). Then it restarts whatever is down and waits for every job to end.

Each job is trivial: it appends "JOB_ID COPY start T" and, after
`--job-seconds` or when it is stopped (SIGTERM), "JOB_ID COPY end T" to a
shared file (COPY: the shell's pid, one per copy of the job; the job
cannot see its attempt number), so two copies of one job that ran at the
same time can be counted. A copy with no end line (killed outright) counts
as running until the end, so it overlaps any later copy.

It prints: accepted (submissions that got their job ids back), lost
(accepted jobs that did not end `succeeded` with a complete run in the
file), duplicated (jobs made beyond one per submission: a name seen
twice), overlapping copies (jobs with two runs whose start..end overlap),
jobs run more than once (one after the other), the longest window with no
successful submission, the chaos done, the time each restarted server took
to answer /healthz and /readyz, and the machine-speed line the other
benches print. Goal (issue 14): 10,000 accepted, 0 lost, 0 duplicates, 0
overlapping copies, longest outage <= 10 s. Asserts nothing.

    nice uv run python bench/chaos.py [--backend postgres|sqlite] [--submissions 10000]
    nice uv run python bench/chaos.py --quick      # 600 submissions, a few kills
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import random
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from machine import describe, speed_line

from schedulearn.agent import credential
from schedulearn.cli.client import ApiError, Client, new_key
from schedulearn.cli.localcluster import AgentProcess, ServerProcess, ctrl_c_held
from schedulearn.cli.localpostgres import LocalPostgres
from schedulearn.protocol import JobSpec, JobState
from schedulearn.server.scheduler import LEADER_LOCK

ADMIN = "chaos-admin"
AGENT = "chaos-agent"
# Statuses a submission is tried again after (with the same key): the server
# or its database was unavailable. Any other 4xx is a rejection.
TRY_AGAIN = {0, 408, 429, 500, 502, 503, 504}


@dataclass
class Replica:
    name: str
    process: ServerProcess
    starts: list[tuple[float, float | None]] = field(default_factory=list)  # (healthz, readyz)
    ready: threading.Event = field(default_factory=threading.Event)  # since its last start


@dataclass
class Tally:
    """What the submitting clients saw (appended to by several threads; list appends are atomic)."""

    accepted: list[tuple[str, list[int]]] = field(default_factory=list)  # (name, ids)
    success_times: list[float] = field(default_factory=list)
    retries: collections.Counter[int] = field(default_factory=collections.Counter)
    rejected: list[str] = field(default_factory=list)


def timed_start(replica: Replica, timeout: float = 120.0) -> None:
    """Start the replica and note how long it took to answer /healthz and /readyz."""
    replica.ready.clear()
    replica.process.start()
    began = time.monotonic()
    healthz: float | None = None
    deadline = began + timeout
    with httpx.Client(timeout=1.0) as http:
        while time.monotonic() < deadline and replica.process.alive:
            path = "/readyz" if healthz is not None else "/healthz"
            with contextlib.suppress(httpx.HTTPError):
                if http.get(replica.process.url + path).status_code == 200:
                    if healthz is None:
                        healthz = time.monotonic() - began
                        continue
                    replica.starts.append((healthz, time.monotonic() - began))
                    replica.ready.set()
                    return
            time.sleep(0.02)
    replica.starts.append((healthz if healthz is not None else float("nan"), None))


def job_command(stamps: Path, seconds: float) -> str:
    line = f'"$SCHEDULEARN_JOB_ID $$ %s $(date +%%s.%%N)" >> {stamps}'
    # A copy that is stopped (SIGTERM: a lease lapse, a lost node) still writes
    # its end, so a stopped copy and the next one can be told apart from two
    # copies at once; `wait` lets the trap run as soon as the signal comes.
    end = f"echo {line % 'end'}"
    return f"trap '{end}; exit 143' TERM; echo {line % 'start'}; sleep {seconds:g} & wait $!; {end}"


def submitter(
    index: int, count: int, servers: str, command: str, tally: Tally, give_up: float
) -> None:
    """Submit `count` jobs one by one, each retried with its own key until accepted."""
    with Client(servers, ADMIN, retry_seconds=30.0) as client:
        for i in range(count):
            name = f"chaos-{index}-{i}"
            spec = JobSpec(name=name, command=command, gpus=0, cpus=1)
            key = new_key()
            deadline = time.monotonic() + give_up
            while True:
                try:
                    reply = client.submit(spec, key=key)
                except ApiError as exc:
                    if exc.status in TRY_AGAIN and time.monotonic() < deadline:
                        tally.retries[exc.status] += 1
                        time.sleep(0.2)
                        continue
                    tally.rejected.append(f"{name}: HTTP {exc.status} {exc.message}")
                    break
                tally.accepted.append((name, list(reply.ids)))
                tally.success_times.append(time.monotonic())
                break


class Chaos:
    """Kills and restarts processes at random until told to stop; logs what it did."""

    def __init__(
        self,
        replicas: list[Replica],
        agents: list[AgentProcess],
        pg: LocalPostgres | None,
        database: str,
        every: tuple[float, float],
        seed: int,
    ) -> None:
        self.replicas = replicas
        self.agents = agents
        self.pg = pg
        self.database = database
        self.every = every
        self.random = random.Random(seed)
        self.done: list[str] = []
        self.stop = threading.Event()
        self.pg_restart_due = threading.Event()
        self.pg_restarted = False
        self.began = time.monotonic()
        self._restarts: list[threading.Thread] = []
        self._pending: set[str] = set()  # agents killed, to be started again

    def note(self, what: str) -> None:
        self.done.append(f"{time.monotonic() - self.began:7.1f}s {what}")

    def run(self) -> None:
        while not self.stop.wait(self.random.uniform(*self.every)):
            if self.pg is not None and self.pg_restart_due.is_set():
                self.pg_restart_due.clear()
                self.restart_postgres()
                continue
            self.kill_one()

    def restart_postgres(self) -> None:
        assert self.pg is not None
        began = time.monotonic()
        self.pg.crash()
        time.sleep(self.random.uniform(1.0, 3.0))
        self.pg.start()
        took = time.monotonic() - began
        self.note(f"PostgreSQL crashed (immediate stop) and started again: down {took:.1f}s")
        self.pg_restarted = True

    def kill_one(self) -> None:
        for agent in self.agents:
            if not agent.alive and agent.name not in self._pending:
                # Not killed by us: it crashed or gave up. Say so, and start it again.
                code = agent.popen.returncode if agent.popen else None
                self.note(f"agent {agent.name} had exited by itself (status {code}); restarted")
                self._restart_agent(agent)
        choices: list[str] = ["agent"]
        # A replica still starting is left alone, and so is the last ready one of
        # several: that would be every replica down at once, not a failover.
        live = [r for r in self.replicas if r.process.alive and r.ready.is_set()]
        if len(self.replicas) == 1:
            if live:
                choices.append("server")
        elif len(live) >= 2:
            leader = self.pg.advisory_holder(LEADER_LOCK, self.database) if self.pg else None
            if any(r.name == leader for r in live):
                choices.append("leader")
            if any(r.name != leader for r in live):
                choices.append("follower")
        kind = self.random.choice(choices)
        if kind == "agent":
            live_agents = [a for a in self.agents if a.alive]
            if not live_agents:
                return
            agent = self.random.choice(live_agents)
            agent.kill()
            self.note(f"kill -9 agent {agent.name}")
            self._pending.add(agent.name)
            self._later(lambda: self._restart_agent(agent))
            return
        if kind == "server":
            target = live[0]
        else:
            leader = self.pg.advisory_holder(LEADER_LOCK, self.database) if self.pg else None
            pick = [r for r in live if (r.name == leader) == (kind == "leader")]
            if not pick:
                return
            target = pick[0]
        target.process.kill()
        self.note(f"kill -9 {kind} replica {target.name}")
        self._later(lambda: timed_start(target))

    def _restart_agent(self, agent: AgentProcess) -> None:
        state_dir = Path(agent.args[agent.args.index("--state-dir") + 1])
        if credential.load(state_dir) is not None:
            # It exchanged its one-time join token: the stored credential now.
            agent.env.pop("SCHEDULEARN_JOIN_TOKEN", None)
        agent.start()
        self._pending.discard(agent.name)

    def _later(self, restart: object) -> None:
        delay = self.random.uniform(1.0, 4.0)

        def run() -> None:
            time.sleep(delay)
            restart()  # type: ignore[operator]  # a zero-argument callable

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._restarts.append(thread)

    def settle(self, thread: threading.Thread) -> None:
        """Stop killing (`thread` runs `run`); wait for pending restarts; start
        whatever is still down."""
        self.stop.set()
        thread.join()
        for thread in self._restarts:
            thread.join()
        for replica in self.replicas:
            if not replica.process.alive:
                timed_start(replica)
        for agent in self.agents:
            if not agent.alive:
                self._restart_agent(agent)


def all_jobs(client: Client) -> list[tuple[int, str, JobState]]:
    out: list[tuple[int, str, JobState]] = []
    offset = 0
    while True:
        page = client.jobs(offset=offset, limit=1000, order="asc")
        out += [(j.id, j.name, j.state) for j in page.items]
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return out


def wait_all_final(client: Client, timeout: float) -> float:
    began = time.monotonic()
    busy = ["pending", "assigned", "running", "preempting", "lost"]
    while time.monotonic() - began < timeout:
        with contextlib.suppress(ApiError):
            if client.jobs(states=busy, limit=1).total == 0:
                return time.monotonic() - began
        time.sleep(1.0)
    return float("nan")


def runs_from(stamps: Path) -> dict[int, dict[str, list[float]]]:
    """job id -> copy -> [start, end?] from the file the jobs wrote."""
    runs: dict[int, dict[str, list[float]]] = collections.defaultdict(dict)
    if not stamps.exists():
        return runs
    for line in stamps.read_text().splitlines():
        parts = line.split()
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        job, copy, what, when = int(parts[0]), parts[1], parts[2], float(parts[3])
        times = runs[job].setdefault(copy, [])
        if what == "start":
            times.insert(0, when)
        else:
            times.append(when)
    return runs


def overlapping(copies: dict[str, list[float]]) -> bool:
    spans = sorted((t[0], t[-1] if len(t) > 1 else float("inf")) for t in copies.values())
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))


def longest_gap(began: float, times: list[float], ended: float) -> float:
    points = [began, *sorted(times), ended]
    return max(b - a for a, b in itertools.pairwise(points))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    p.add_argument("--submissions", type=int, default=10_000)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--agents", type=int, default=3)
    p.add_argument("--agent-cpus", type=int, default=8, help="job slots per agent")
    p.add_argument("--job-seconds", type=float, default=0.2)
    p.add_argument("--kill-every", type=float, nargs=2, default=(4.0, 10.0), metavar=("MIN", "MAX"))
    p.add_argument("--drain-timeout", type=float, default=3600.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="600 submissions, kills every 2-4 s")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, stamps)")
    args = p.parse_args()
    if args.quick:
        args.submissions = min(args.submissions, 600)
        args.kill_every = (2.0, 4.0)

    root = Path(tempfile.mkdtemp(prefix="sl-chaos-"))
    stamps = root / "stamps"
    pg: LocalPostgres | None = None
    replicas: list[Replica] = []
    agents: list[AgentProcess] = []
    print(f"machine: {describe()}")
    print(speed_line())
    try:
        if args.backend == "postgres":
            pg = LocalPostgres(prefix="sl-chaos-pg-")
            database = "chaos"
            url = pg.new_database(database)
            names = ["a", "b"]
        else:
            database = str(root / "chaos.db")
            url = f"sqlite:///{database}"
            names = ["a"]
        for name in names:
            db_url = f"{url}?application_name={name}" if pg else url
            env = {"SCHEDULEARN_LOG_LEVEL": "warning"}
            process = ServerProcess(db_url, root / f"server-{name}.log", ADMIN, AGENT, env=env)
            replicas.append(Replica(name, process))
        for replica in replicas:
            timed_start(replica)
        servers = ",".join(r.process.url for r in replicas)
        for i in range(args.agents):
            agent = AgentProcess(
                servers, "", f"agent{i}", 0, root / f"agent{i}.log", root / f"state{i}",
                extra=["--cpus", str(args.agent_cpus), "--workdir", str(root),
                       "--log-level", "warning"],
            )  # fmt: skip
            agent.enroll(replicas[i % len(replicas)].process)  # any replica enrolls
            agent.start()
            agents.append(agent)
        print(
            f"backend: {args.backend}, {len(replicas)} server replica(s), {args.agents} agents "
            f"x {args.agent_cpus} slots, {args.clients} clients, {args.submissions} "
            f"submissions, jobs of {args.job_seconds:g}s; kills every "
            f"{args.kill_every[0]:g}-{args.kill_every[1]:g}s"
        )
        chaos = Chaos(replicas, agents, pg, database, tuple(args.kill_every), args.seed)
        tally = Tally()
        command = job_command(stamps, args.job_seconds)
        share = [args.submissions // args.clients] * args.clients
        share[0] += args.submissions - sum(share)
        threads = [
            threading.Thread(
                target=submitter, args=(i, n, servers, command, tally, 600.0), daemon=True
            )
            for i, n in enumerate(share)
        ]
        began = time.monotonic()
        chaos.began = began
        chaos_thread = threading.Thread(target=chaos.run, daemon=True)
        for thread in threads:
            thread.start()
        chaos_thread.start()
        # PostgreSQL restarts once, at the first chaos turn after 40% are in.
        asked = False
        while any(t.is_alive() for t in threads):
            halfway = len(tally.accepted) >= 0.4 * args.submissions
            if pg is not None and halfway and not asked:
                chaos.pg_restart_due.set()
                asked = True
            time.sleep(0.2)
        submitted = time.monotonic()
        chaos.settle(chaos_thread)
        if pg is not None and not chaos.pg_restarted:
            chaos.pg_restart_due.clear()
            chaos.restart_postgres()  # the run was shorter than the chaos turns
        with Client(servers, ADMIN, retry_seconds=120.0) as client:
            drained = wait_all_final(client, args.drain_timeout)
            jobs = all_jobs(client)
        report(args, tally, jobs, runs_from(stamps), chaos, replicas, began, submitted, drained)
    finally:
        with ctrl_c_held():
            for agent in agents:
                agent.kill()
            for replica in replicas:
                replica.process.kill()
            if pg is not None:
                pg.remove()
        if args.keep:
            print(f"kept {root}")
        else:
            # Orphaned job processes may still write for a moment.
            shutil.rmtree(root, ignore_errors=True)


def report(
    args: argparse.Namespace,
    tally: Tally,
    jobs: list[tuple[int, str, JobState]],
    runs: dict[int, dict[str, list[float]]],
    chaos: Chaos,
    replicas: list[Replica],
    began: float,
    submitted: float,
    drained: float,
) -> None:
    by_name = collections.Counter(name for _, name, _ in jobs if name.startswith("chaos-"))
    state_of = {job_id: state for job_id, _, state in jobs}
    accepted_ids = [i for _, ids in tally.accepted for i in ids]
    complete = {j for j, copies in runs.items() if any(len(t) == 2 for t in copies.values())}
    lost = [
        i for i in accepted_ids if state_of.get(i) is not JobState.SUCCEEDED or i not in complete
    ]
    duplicated = sum(n - 1 for n in by_name.values() if n > 1)
    overlaps = sum(1 for copies in runs.values() if len(copies) > 1 and overlapping(copies))
    again = sum(1 for copies in runs.values() if len(copies) > 1)
    outage = longest_gap(began, tally.success_times, submitted)
    states = collections.Counter(state.value for _, _, state in jobs)
    print(f"submission phase: {submitted - began:.1f}s; drained {drained:.1f}s after it")
    print(f"accepted: {len(tally.accepted)} of {args.submissions}")
    print(f"lost: {len(lost)}" + (f" (e.g. job ids {lost[:10]})" if lost else ""))
    print(f"duplicated: {duplicated}")
    print(f"overlapping copies: {overlaps} (jobs run more than once: {again})")
    print(f"longest outage (no successful submission): {outage:.1f}s")
    print(f"job states at the end: {dict(sorted(states.items()))}")
    retried = ", ".join(f"HTTP {s or 'unreachable'}: {n}" for s, n in sorted(tally.retries.items()))
    print(f"submissions tried again after an error: {retried or 'none'}")
    if tally.rejected:
        print(f"rejected: {len(tally.rejected)}, e.g. {tally.rejected[:3]}")
    print(f"chaos ({len(chaos.done)} events):")
    for line in chaos.done:
        print(f"  {line}")
    for replica in replicas:
        health = [s[0] for s in replica.starts]
        ready = [s[1] for s in replica.starts if s[1] is not None]
        ready_text = f"{statistics.median(ready):.2f}s (max {max(ready):.2f})" if ready else "-"
        print(
            f"replica {replica.name}: {len(replica.starts)} starts; to /healthz median "
            f"{statistics.median(health):.2f}s (max {max(health):.2f}), to /readyz median "
            f"{ready_text}"
        )


if __name__ == "__main__":
    main()
