"""The agent's event outbox against a real server process: events of many
runners go in one request and every one is acknowledged; a batch the
server refuses as a whole is sent again event by event."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from agent_support import AGENT_TOKEN, AdminApi, ServerProc

from dependencies import need_root
from schedulearn.agent import cgroupmounts
from schedulearn.agent.client import AgentClient
from schedulearn.agent.executors.process import SubprocessExecutor
from schedulearn.agent.outbox import EventOutbox
from schedulearn.agent.starts import StartGate
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.protocol import (
    Assignment,
    EventKind,
    Executor,
    GpuInfo,
    JobEventReport,
    NodeRegistration,
)


def report(job_id: int, kind: EventKind, exit_code: int | None = None) -> JobEventReport:
    return JobEventReport(
        job_id=job_id, attempt=1, node="n1", kind=kind, exit_code=exit_code, at=time.time()
    )


async def _place(client: AgentClient, api: AdminApi, jobs: int) -> list[int]:
    """Register node n1 by hand and take the starts of `jobs` one-GPU jobs."""
    gpus = [GpuInfo(index=i) for i in range(jobs)]
    await client.register(NodeRegistration(name="n1", gpus=gpus, executors=[Executor.SUBPROCESS]))
    ids = [api.submit(command="true", gpus=1) for _ in range(jobs)]
    started: list[int] = []
    deadline = time.time() + 20
    while len(started) < jobs and time.time() < deadline:
        started += [a.job_id for a in (await client.work("n1", 2.0)).starts]
    assert sorted(started) == sorted(ids)
    return ids


def test_events_of_many_runners_share_one_request(server: ServerProc, api: AdminApi) -> None:
    async def scenario() -> tuple[list[int], list[bool], int]:
        client = AgentClient(server.url, AGENT_TOKEN)
        outbox = EventOutbox(client)
        try:
            ids = await _place(client, api, 6)

            async def runner(job_id: int, code: int) -> bool:
                started = await outbox.send(report(job_id, EventKind.STARTED))
                exited = await outbox.send(report(job_id, EventKind.EXITED, code))
                return started.ok and exited.ok and not exited.ignored

            codes = [0, 0, 0, 0, 0, 7]
            oks = await asyncio.gather(*(runner(j, c) for j, c in zip(ids, codes, strict=True)))
            return ids, oks, outbox.requests
        finally:
            await outbox.close()
            await client.close()

    ids, oks, requests = asyncio.run(scenario())
    assert all(oks)
    # Six runners queue their "started" together, then their "exited" together.
    assert requests == 2
    states = [api.job(j) for j in ids]
    assert [s["state"] for s in states] == ["succeeded"] * 5 + ["failed"]
    assert states[-1]["exit_code"] == 7


def test_uncontained_starts_through_the_start_gate_report_together(
    server: ServerProc, api: AdminApi, tmp_path: Path
) -> None:
    """Without cgroups a process start never leaves the agent's loop, so the
    starts of one work reply, two at a time through the start gate, all queue
    their "started" before the outbox runs: one request (a start that hopped
    to a thread let the first report go alone, the rest after it)."""
    store = StateStore(tmp_path / "state")

    async def scenario() -> tuple[list[int], int]:
        client = AgentClient(server.url, AGENT_TOKEN)
        outbox = EventOutbox(client)
        executor = SubprocessExecutor("n1", cgroups=None)
        gate = StartGate(concurrency=2)
        try:
            ids = await _place(client, api, 6)

            async def runner(job_id: int) -> None:
                record = JobRecord(
                    job_id=job_id,
                    attempt=1,
                    executor=Executor.SUBPROCESS,
                    job_dir=str(store.create_job_dir(job_id, 1)),
                    checkpoint_dir=str(store.default_checkpoint_dir(job_id)),
                    started_at=time.time(),
                )
                assignment = Assignment(job_id=job_id, attempt=1, command="true")
                async with gate.slot():
                    handle = await executor.start(assignment, record)
                await outbox.send(report(job_id, EventKind.STARTED))
                await handle.wait()

            await asyncio.gather(*(runner(j) for j in ids))
            return ids, outbox.requests
        finally:
            await outbox.close()
            await client.close()
            await executor.close()

    ids, requests = asyncio.run(scenario())
    assert requests == 1
    assert [api.job(j)["state"] for j in ids] == ["running"] * 6


def test_contained_starts_through_the_start_gate_report_together(
    server: ServerProc, api: AdminApi, tmp_path: Path
) -> None:
    """With cgroups a start waits on a thread twice (its cgroup made, then
    joined). Through the agent's default gate the starts of one work reply
    make their cgroups in one thread trip and join them in another
    (`agent.threadcalls`), so their "started" reports still go in one
    request (a trip per start, or a gate of 4 places, let them out a few
    at a time: docs/results.md 6.17)."""
    need_root("makes cgroups")
    store = StateStore(tmp_path / "state")
    # The worker's pid apart: xdist workers give the two databases' runs one tmp name.
    backend = cgroupmounts.detect("auto", f"test.{os.getpid()}.{tmp_path.name[-20:]}")

    async def scenario() -> tuple[list[int], int, int]:
        client = AgentClient(server.url, AGENT_TOKEN)
        outbox = EventOutbox(client)
        executor = SubprocessExecutor("n1", cgroups=backend)
        gate = StartGate()
        try:
            ids = await _place(client, api, 6)

            async def runner(job_id: int) -> None:
                record = JobRecord(
                    job_id=job_id,
                    attempt=1,
                    executor=Executor.SUBPROCESS,
                    job_dir=str(store.create_job_dir(job_id, 1)),
                    checkpoint_dir=str(store.default_checkpoint_dir(job_id)),
                    started_at=time.time(),
                )
                assignment = Assignment(job_id=job_id, attempt=1, command="true")
                async with gate.slot():
                    handle = await executor.start(assignment, record)
                await outbox.send(report(job_id, EventKind.STARTED))
                await handle.wait()

            await asyncio.gather(*(runner(j) for j in ids))
            return ids, outbox.requests, executor.thread_calls.trips
        finally:
            await outbox.close()
            await client.close()
            await executor.close()

    try:
        ids, requests, trips = asyncio.run(scenario())
    finally:
        for left in backend.runs():
            left.empty_and_remove(10)
        backend.close()
    assert requests == 1
    # Made together, joined together; the six removals after the runs ended
    # came in however many turns their ends were seen in.
    assert 3 <= trips <= 8, trips
    assert [api.job(j)["state"] for j in ids] == ["running"] * 6


def test_a_batch_refused_as_a_whole_is_sent_event_by_event(
    server: ServerProc, api: AdminApi
) -> None:
    async def scenario() -> tuple[list[int], list[bool]]:
        client = AgentClient(server.url, AGENT_TOKEN)
        outbox = EventOutbox(client)
        try:
            ids = await _place(client, api, 2)
            good = report(ids[0], EventKind.STARTED)
            # Longer than the wire model allows: the server answers 422 for the batch.
            bad = report(ids[1], EventKind.STARTED).model_copy(update={"message": "x" * 20_000})
            acks = await asyncio.gather(outbox.send(good), outbox.send(bad))
            return ids, [a.ignored for a in acks]
        finally:
            await outbox.close()
            await client.close()

    ids, ignored = asyncio.run(scenario())
    assert ignored == [False, True]
    assert api.job(ids[0])["state"] == "running"
    assert api.job(ids[1])["state"] == "assigned"  # its only event was refused for good
