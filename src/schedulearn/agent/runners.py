"""The set of runners: the jobs this agent runs, one `JobRunner` per job.

The work loop hands it starts and stop orders (`start`, `stop`); a
registration reply says which runs of an earlier agent it follows again
and which the server wrote off (`adopt`); a lapsed lease stops every run
that had not ended (`stop_for_lapse`); the agent's exit stops the jobs or
leaves them running (`stop_all`, `abandon_all`). A runner leaves the set
when its job's exit has been acknowledged (its `on_done`), or when a newer
attempt of its job replaces it.

Heartbeats read the set from their own thread (`snapshot`), without
waiting for the event loop that changes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from schedulearn.agent import lease as leases
from schedulearn.agent.accounts import Account
from schedulearn.agent.executors.base import ExecutorImpl, NewRecord, RunHandle, StartError
from schedulearn.agent.jobs import JobRunner, RunnerContext
from schedulearn.agent.state import JobRecord
from schedulearn.core.capabilities import ExecutorKind
from schedulearn.protocol import Assignment, Executor, RunningJobReport, StopOrder, StopReason

log = logging.getLogger(__name__)

Background = Callable[[Coroutine[Any, Any, None]], None]


class Runners:
    """This node's runners by job id; every change happens in the agent's event loop."""

    def __init__(
        self,
        ctx: RunnerContext,
        executors: dict[Executor, ExecutorImpl],
        background: Background,
    ) -> None:
        self._ctx = ctx
        self._executors = executors
        # Work that outlives the call that asked for it (a replacement waiting
        # for the old run to let go); the agent cancels it when it exits.
        self._background = background
        self._by_job: dict[int, JobRunner] = {}

    def __len__(self) -> int:
        return len(self._by_job)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._by_job

    def reports(self) -> list[RunningJobReport]:
        return [r.report() for r in self._by_job.values()]

    def snapshot(self) -> tuple[JobRunner, ...] | None:
        """The runners, read from another thread (the heartbeat's); None if the
        set kept changing while it was read."""
        for _ in range(3):
            try:
                return tuple(self._by_job.values())
            except RuntimeError:  # changed while read; read again
                continue
        return None

    # --- work from the server --------------------------------------------------

    def start(self, assignment: Assignment) -> None:
        """Start an assignment, unless this attempt or a newer one is here already."""
        old = self._by_job.get(assignment.job_id)
        if old is not None and old.attempt >= assignment.attempt:
            return  # delivered twice, or an older attempt than the one running
        store = self._ctx.store
        job_dir = store.create_job_dir(assignment.job_id, assignment.attempt)
        checkpoint = assignment.checkpoint_dir or str(
            store.default_checkpoint_dir(assignment.job_id)
        )
        record = JobRecord(
            job_id=assignment.job_id,
            attempt=assignment.attempt,
            executor=assignment.executor,
            job_dir=str(job_dir),
            checkpoint_dir=checkpoint,
            started_at=time.time(),
            own_checkpoint_dir=assignment.checkpoint_dir is None,
        )
        runner = JobRunner(
            self._ctx,
            self._executor_for(assignment),
            record,
            assignment=assignment,
            on_done=self._done,
        )
        self._by_job[assignment.job_id] = runner
        if old is None:
            runner.launch()
        else:
            # A newer attempt of a job whose old run is still here: the old
            # one is obsolete, and must let go of the GPUs first.
            self._background(_replace(old, runner))

    def _executor_for(self, assignment: Assignment) -> ExecutorImpl:
        """By name, else this agent's executor of the kind the job needs (the
        server places by kind: a job with an image on a node running containers)."""
        needs = ExecutorKind.CONTAINER if assignment.image else ExecutorKind.PROCESS
        return (
            self._executors.get(assignment.executor)
            or next((e for e in self._executors.values() if e.runs is needs), None)
            or _Unoffered(assignment.executor, self._ctx.node)
        )

    async def stop(self, order: StopOrder) -> None:
        runner = self._by_job.get(order.job_id)
        if runner is None or runner.attempt != order.attempt:
            # Already ended (its exit report is on its way) or never here.
            return
        log.info(
            "stopping job %s (%s, grace %.0fs)",
            order.job_id,
            order.reason.value,
            order.grace_seconds,
        )
        await runner.stop(order.reason, order.grace_seconds)

    def _done(self, runner: JobRunner) -> None:
        if self._by_job.get(runner.job_id) is runner:
            del self._by_job[runner.job_id]

    # --- registration ----------------------------------------------------------

    async def adopt(self, recovered: list[RunHandle], adopt: set[int]) -> None:
        """Follow again the recovered runs of jobs in `adopt`; stop every other
        recovered run, and every runner whose job is not in `adopt`."""
        written_off: list[JobRunner] = []
        for handle in recovered:
            record = handle.record
            runner = JobRunner(
                self._ctx,
                self._executors[record.executor],
                record,
                handle=handle,
                on_done=self._done,
            )
            if record.job_id in adopt and record.job_id not in self._by_job:
                log.info("re-adopted job %s (attempt %s)", record.job_id, record.attempt)
                self._by_job[record.job_id] = runner
                runner.launch()
            else:
                written_off.append(runner)
        for job_id, runner in list(self._by_job.items()):
            if job_id not in adopt:
                # Registering again after the server marked this node down:
                # it has requeued these jobs, maybe onto other nodes.
                self._by_job.pop(job_id)
                written_off.append(runner)
        for runner in written_off:
            log.info(
                "the server wrote off job %s (attempt %s) here; stopping it",
                runner.job_id,
                runner.attempt,
            )
        # A run that ended on its own meanwhile (while this agent was down) is
        # reported: if the job has not run again, the server lets that exit stand.
        await asyncio.gather(
            *(r.report_late_exit() if r.ended_on_its_own() else r.discard() for r in written_off)
        )

    # --- the lease -------------------------------------------------------------

    async def stop_for_lapse(self, grace: float) -> None:
        """Stop every run that had not ended (the lease's guard is stopping them
        too), marked so that none of their exits is reported; runs that ended
        on their own are kept, so their exits still are."""
        doomed = [r for r in self._by_job.values() if not r.ended_on_its_own()]
        why = "stopped because this node's lease lapsed (the agent could not reach the server)"
        for runner in doomed:
            self._by_job.pop(runner.job_id, None)
            with contextlib.suppress(OSError):
                leases.mark_stopped(runner.record.job_dir, why)
            log.warning("lease lapsed: stopping job %s (attempt %s)", runner.job_id, runner.attempt)
        await asyncio.gather(*(r.discard(grace) for r in doomed))

    # --- the agent's exit ------------------------------------------------------

    async def stop_all(self, grace: float, why: str) -> None:
        """Stop every job (the agent exits with `stop_jobs_on_exit`), giving
        their exit reports a moment; unsent ones stay on disk for next time."""
        runners = list(self._by_job.values())
        if not runners:
            return
        log.info("stopping %d jobs before exiting", len(runners))
        await asyncio.gather(
            *(r.stop(StopReason.PREEMPT, grace, why) for r in runners), return_exceptions=True
        )
        pending = [r.task for r in runners if r.task is not None]
        if pending:
            await asyncio.wait(pending, timeout=5.0)

    async def abandon_all(self) -> None:
        """Let go of every run that keeps going when the agent exits."""
        await asyncio.gather(*(r.abandon() for r in list(self._by_job.values())))


async def _replace(old: JobRunner, new: JobRunner) -> None:
    await old.discard()
    new.launch()


class _Unoffered:
    """Stands in for an executor this agent does not run; every start fails."""

    runs = ExecutorKind.PROCESS
    runtime = ""
    containment = "none"

    def __init__(self, kind: Executor, node: str) -> None:
        self.kind = kind
        self.node = node

    async def start(
        self, assignment: Assignment, record: JobRecord, account: Account | None = None
    ) -> RunHandle:
        raise StartError(
            f"node {self.node!r} does not offer the {self.kind.value} executor; start its "
            f"agent with --executor {self.kind.value}"
        )

    async def recover(
        self, records: list[JobRecord], new_record: NewRecord | None = None
    ) -> list[RunHandle]:
        return []

    async def close(self) -> None:
        return None
