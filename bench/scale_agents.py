"""Lightweight agents for bench/scale.py: many nodes per process, on the real wire.

Each `FakeNode` is one GPU host as the server sees it: it exchanges its
own join token for its own credential (`POST /api/v1/agent/join`),
registers its virtual GPUs, heartbeats at the interval the server asks
for, long-polls for work, and "runs" each assignment by reporting it
started, sleeping the duration its command names (`sleep SECONDS`),
shipping one log batch and reporting its exit. Every call goes through
the agent's own client (`agent.client.AgentClient`, the lean keep-alive
HTTP it uses), the job events through the agent's own batching outbox
(`agent.outbox.EventOutbox`), and every body is a `schedulearn.protocol`
model, so these agents cannot drift from the real one; only the executor
(a sleep instead of a process) and the GPUs (declared) are not real.

A worker process (`worker`) runs a few hundred nodes on one event loop
and writes what it measured to a JSON file when told to stop:
heartbeat round trips, the time from each GPU freeing (the moment its
job's exit report went out) to the next assignment that names it, its
own event loop's lag (so a slow client can be told from a slow server),
and counts of jobs started, finished, stopped by the server, and
registrations the server asked for again (a node it had marked down).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path

from schedulearn.agent.client import AgentClient, Rejected, ServerUnavailable
from schedulearn.agent.outbox import EventOutbox
from schedulearn.agent.retry import Retry
from schedulearn.protocol import (
    Assignment,
    CapabilitiesReport,
    EventKind,
    Executor,
    GpuInfo,
    GpuSample,
    Heartbeat,
    JobEventReport,
    LogBatch,
    LogLine,
    NodeRegistration,
    RunningJobReport,
    StopOrder,
)

POLL_WAIT = 30.0  # the real agent's default long-poll wait (the server caps it)
LOG_LINES = 5  # lines in the one log batch each run ships


@dataclass
class Samples:
    """What one worker measured: (wall-clock time, seconds) pairs, and counts."""

    heartbeat: list[tuple[float, float]] = field(default_factory=list)
    free_to_start: list[tuple[float, float]] = field(default_factory=list)
    loop_lag: list[tuple[float, float]] = field(default_factory=list)
    started: int = 0
    finished: int = 0
    stopped: dict[str, int] = field(default_factory=dict)
    reregistered: int = 0
    errors: list[str] = field(default_factory=list)


def job_seconds(a: Assignment) -> float:
    """How long a run lasts: the jobs are `sleep SECONDS` (bench/scale.py submits them)."""
    command = a.command if isinstance(a.command, list) else a.command.split()
    try:
        return float(command[-1])
    except (IndexError, ValueError):
        return 0.0


class FakeNode:
    """One enrolled node with `gpus` virtual GPUs, speaking the agent protocol."""

    def __init__(self, server: str, name: str, join_token: str, gpus: int, out: Samples) -> None:
        self.server = server
        self.name = name
        self.join_token = join_token
        self.gpus = gpus
        self.out = out
        self.client = AgentClient(server, "")
        # The real agent heartbeats on a client (and connection) of its own.
        self.beat_client = AgentClient(server, "")
        self.events = EventOutbox(self.client)
        self.runs: dict[int, tuple[Assignment, asyncio.Task[None]]] = {}
        self.freed_at: dict[int, float] = {}  # GPU index -> when its last run's exit went out
        self.heartbeat_seconds = 2.0
        self.work_through: float | None = None  # the newest work batch acted on, echoed
        self.registered = asyncio.Event()
        self.reporting: set[asyncio.Task[None]] = set()  # exits of stopped runs on the way

    async def enrol(self) -> None:
        # Retried while the server is busy or unreachable, as the agent's enrolment does.
        joined = await Retry(f"{self.name} join").run(lambda: self.client.join(self.join_token))
        self.client.set_token(joined.credential)
        self.beat_client.set_token(joined.credential)
        await self.register()

    def registration(self) -> NodeRegistration:
        return NodeRegistration(
            name=self.name,
            gpus=[
                GpuInfo(index=i, uuid=f"virtual-{self.name}-{i}", type="virtual")
                for i in range(self.gpus)
            ],
            cpus=64,
            memory_gb=512,
            executors=[Executor.SUBPROCESS],
            capabilities=CapabilitiesReport(executors=["process"]),
            running=self.reports(),
            containment="none",
        )

    def reports(self) -> list[RunningJobReport]:
        return [RunningJobReport(job_id=a.job_id, attempt=a.attempt) for a, _ in self.runs.values()]

    async def register(self) -> None:
        retry = Retry(f"{self.name} register")
        reply = await retry.run(lambda: self.client.register(self.registration()))
        self.heartbeat_seconds = max(0.2, reply.heartbeat_seconds)
        self.registered.set()

    async def heartbeats(self, stop: asyncio.Event) -> None:
        # Nodes joined over seconds: each beats on its own phase, as real agents do.
        await asyncio.sleep(random.uniform(0, self.heartbeat_seconds))
        while not stop.is_set():
            body = Heartbeat(
                name=self.name,
                gpus=[GpuSample(index=i) for i in range(self.gpus)],
                running=self.reports(),
                work_through=self.work_through,
            )
            sent = time.time()
            try:
                reply = await self.beat_client.heartbeat(body)
            except (ServerUnavailable, Rejected) as exc:
                self.out.errors.append(f"{self.name} heartbeat: {exc}")
            else:
                self.out.heartbeat.append((sent, time.time() - sent))
                self.heartbeat_seconds = max(0.2, reply.heartbeat_seconds)
                if reply.reregister:
                    self.out.reregistered += 1
                    await self.register()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.heartbeat_seconds)

    async def work(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                batch = await self.client.work(self.name, POLL_WAIT)
            except (ServerUnavailable, Rejected) as exc:
                self.out.errors.append(f"{self.name} work: {exc}")
                await asyncio.sleep(1.0)
                continue
            now = time.time()
            for a in batch.starts:
                for gpu in a.gpus:
                    freed = self.freed_at.pop(gpu, None)
                    if freed is not None:
                        self.out.free_to_start.append((now, now - freed))
                self.runs[a.job_id] = (a, asyncio.create_task(self.run(a)))
            for order in batch.stops:
                self.stop(order)
            # As the agent's work loop does: its runs are now in `reports()`.
            if batch.at is not None:
                self.work_through = batch.at

    async def run(self, a: Assignment) -> None:
        await self.report(a, EventKind.STARTED, None)
        self.out.started += 1
        await asyncio.sleep(job_seconds(a))
        now = time.time()
        lines = [LogLine(seq=i, text=f"step {i} of job {a.job_id}", at=now) for i in range(1, 6)]
        await self.client.logs(a.job_id, LogBatch(attempt=a.attempt, node=self.name, lines=lines))
        for gpu in a.gpus:
            self.freed_at[gpu] = time.time()
        await self.report(a, EventKind.EXITED, 0)
        self.out.finished += 1
        self.runs.pop(a.job_id, None)

    def stop(self, order: StopOrder) -> None:
        """A stop order (cancel, preempt, lost): end the run and report its exit."""
        self.out.stopped[order.reason.value] = self.out.stopped.get(order.reason.value, 0) + 1
        entry = self.runs.pop(order.job_id, None)
        if entry is None:
            return
        a, task = entry
        task.cancel()
        for gpu in a.gpus:
            self.freed_at[gpu] = time.time()
        task = asyncio.create_task(self.report(a, EventKind.EXITED, -15, on_its_own=False))
        self.reporting.add(task)
        task.add_done_callback(self.reporting.discard)

    async def report(
        self, a: Assignment, kind: EventKind, code: int | None, on_its_own: bool = True
    ) -> None:
        await self.events.send(
            JobEventReport(
                job_id=a.job_id,
                attempt=a.attempt,
                node=self.name,
                kind=kind,
                exit_code=code,
                at=time.time(),
                on_its_own=on_its_own and kind is EventKind.EXITED,
            )
        )

    async def close(self) -> None:
        for _, task in self.runs.values():
            task.cancel()
        await self.events.close()
        await self.client.close()
        await self.beat_client.close()


async def _lag(out: Samples, stop: asyncio.Event, every: float = 0.1) -> None:
    while not stop.is_set():
        before = time.perf_counter()
        await asyncio.sleep(every)
        out.loop_lag.append((time.time(), time.perf_counter() - before - every))


async def _serve(
    server: str, nodes: list[tuple[str, str]], gpus: int, stop_flag: MpEvent, out: Samples
) -> None:
    stop = asyncio.Event()
    fakes = [FakeNode(server, name, token, gpus, out) for name, token in nodes]
    # Enrol a few at a time, as agents started over a minute would.
    gate = asyncio.Semaphore(16)

    async def enrol(fake: FakeNode) -> None:
        async with gate:
            await fake.enrol()

    await asyncio.gather(*(enrol(f) for f in fakes))
    tasks = [asyncio.create_task(_lag(out, stop))]
    for fake in fakes:
        tasks.append(asyncio.create_task(fake.heartbeats(stop)))
        tasks.append(asyncio.create_task(fake.work(stop)))
    while not stop_flag.is_set():
        await asyncio.sleep(0.2)
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.gather(*(f.close() for f in fakes), return_exceptions=True)


def worker(
    server: str, nodes: list[tuple[str, str]], gpus: int, stop_flag: MpEvent, result: str
) -> None:
    """A process's life: serve `nodes` until `stop_flag`, then write `result` (JSON)."""
    out = Samples()
    try:
        asyncio.run(_serve(server, nodes, gpus, stop_flag, out))
    except Exception as exc:  # written out, so the bench says why
        out.errors.append(f"worker failed: {exc!r}")
    Path(result).write_text(json.dumps(out.__dict__))
