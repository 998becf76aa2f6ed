"""A preemption that comes too late: the server begins preempting a job
whose run then ends before the stop order reaches it. A real `JobRunner`
with the process executor runs the job against a real server process;
this test plays the agent's work loop, so it decides whether the stop
order is delivered before the run ends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from agent_support import AGENT_TOKEN, AdminApi, ServerProc
from live_support import set_policy

from schedulearn.agent.client import AgentClient
from schedulearn.agent.executors.process import SubprocessExecutor
from schedulearn.agent.jobs import JobRunner, RunnerContext
from schedulearn.agent.outbox import EventOutbox
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.protocol import Assignment, Executor, GpuInfo, NodeRegistration, StopReason


async def _run(api: AdminApi, server: ServerProc, tmp_path: Path, stop_first: bool) -> str:
    """The state a preemptible job ends in when its run exits 0 while SRTF
    preempts it: after the stop order reached the run (`stop_first`), or
    before it did."""
    client = AgentClient(server.url, AGENT_TOKEN)
    outbox = EventOutbox(client)
    try:
        node = NodeRegistration(name="n1", gpus=[GpuInfo(index=0)], executors=[Executor.SUBPROCESS])
        await client.register(node)
        set_policy(api, "srtf")
        go = tmp_path / "go"
        # Exits 0 once `go` exists, or on SIGTERM (as a script that saves and stops).
        script = f'trap "exit 0" TERM; while [ ! -e {go} ]; do sleep 0.05; done'
        job = api.submit(
            command=["sh", "-c", script], gpus=1, preemptible=True, estimated_duration=3600
        )
        deadline = time.time() + 20
        starts: list[Assignment] = []
        while not starts and time.time() < deadline:
            starts = (await client.work("n1", 2.0)).starts
        (assignment,) = starts
        store = StateStore(tmp_path / "state")
        record = JobRecord(
            job_id=job,
            attempt=assignment.attempt,
            executor=assignment.executor,
            job_dir=str(store.create_job_dir(job, assignment.attempt)),
            checkpoint_dir=str(store.default_checkpoint_dir(job)),
            started_at=time.time(),
        )
        ctx = RunnerContext(client=client, events=outbox, store=store, node="n1")
        runner = JobRunner(ctx, SubprocessExecutor("n1"), record, assignment=assignment)
        task = runner.launch()
        await asyncio.to_thread(api.wait_state, job, ["running"])
        api.submit(command="true", gpus=1, estimated_duration=5)  # shorter: SRTF preempts
        await asyncio.to_thread(api.wait_state, job, ["preempting"])
        if stop_first:
            await runner.stop(StopReason.PREEMPT, 10.0)
        else:
            go.touch()
        await asyncio.wait_for(task, 30)
        return str(api.job(job)["state"])
    finally:
        await outbox.close()
        await client.close()


@pytest.mark.parametrize(
    ("stop_first", "state"),
    [(False, "succeeded"), (True, "pending")],
    ids=["ended-before-the-stop-order", "exited-0-on-the-stop-order"],
)
def test_a_run_is_requeued_only_if_the_stop_order_reached_it(
    server: ServerProc, api: AdminApi, tmp_path: Path, stop_first: bool, state: str
) -> None:
    assert asyncio.run(_run(api, server, tmp_path, stop_first)) == state
