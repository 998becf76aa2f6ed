"""One job run on this node, from start (or re-adoption) to its acknowledged exit.

A `JobRunner` owns one run (one attempt of one job, or this node's part of
a gang): it starts it through an executor, reports `started`, ships its
output, waits for it to end, and reports `exited` (or `failed_to_start`),
each report retried until the server acknowledges it (events go through
the agent's `EventOutbox`, batched with other runners'). Only then does it
clean up: the container, the state record, and the checkpoint directory
of a job that is finished for good.

Checkpoints move with the job when no shared path is configured: before
starting, the checkpoint the assignment names is downloaded into the
job's checkpoint directory; after a preemption the directory is uploaded
(`agent.checkpoints`) before the exit is reported, and the exit message
says whether it was saved. Progress reports are tailed from the run's
progress file (`agent.progress`) while it runs.

Stop orders (cancel, preempt, lost, gang_failed) go through `stop`;
`discard` stops a run the server no longer wants without reporting it
(`report_late_exit` reports one that had ended on its own meanwhile);
`abandon` lets go of a run that keeps going when the agent exits.

A run stopped because the node's lease lapsed (`agent.lease`: its
directory is marked `lease_stopped`) is no exit of the job's own: its
exit is not reported. The agent registers again without it, and the
server counts it lost with the node and runs the job again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from schedulearn.agent import accounts, checkpoints
from schedulearn.agent import lease as leases
from schedulearn.agent.accounts import AccountError, JobsAs
from schedulearn.agent.client import AgentClient
from schedulearn.agent.executors.base import ExecutorImpl, ExitStatus, RunHandle, StartError
from schedulearn.agent.outbox import EventOutbox
from schedulearn.agent.progress import ProgressTail
from schedulearn.agent.shipper import DEFAULT_DISK_CAP_BYTES, LogShipper, upload_full
from schedulearn.agent.starts import StartGate
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.protocol import (
    Assignment,
    EventKind,
    JobEventReport,
    RunningJobReport,
    StopReason,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunnerContext:
    """What every runner of one agent shares."""

    client: AgentClient
    events: EventOutbox
    store: StateStore
    node: str
    log_interval: float = 0.2
    # Whom jobs run as: their owners' unix accounts, or the agent's own user.
    jobs_as: JobsAs = JobsAs.AGENT
    # Every start passes it (`agent.starts`): a bounded start rate.
    starts: StartGate = field(default_factory=StartGate)
    # Each run's output kept on this node's disk (`agent.logspool`) up to this.
    log_disk_cap_bytes: int = DEFAULT_DISK_CAP_BYTES


class JobRunner:
    """Drives one run; its task ends once the server has acknowledged the exit."""

    def __init__(
        self,
        ctx: RunnerContext,
        executor: ExecutorImpl,
        record: JobRecord,
        assignment: Assignment | None = None,
        handle: RunHandle | None = None,
        on_done: Callable[[JobRunner], None] | None = None,
    ) -> None:
        if (assignment is None) == (handle is None):
            raise ValueError("a runner starts an assignment or adopts a handle, not both")
        self.ctx = ctx
        self.executor = executor
        self.record = record
        self.assignment = assignment
        self.handle = handle
        self._on_done = on_done
        self._stop_reason: StopReason | None = None
        self._stop_grace = 0.0
        self._stop_why = ""
        self._started = asyncio.Event()  # the run exists (started, or failed to)
        if handle is not None:
            self._started.set()
        self._report = True
        self.task: asyncio.Task[None] | None = None

    @property
    def job_id(self) -> int:
        return self.record.job_id

    @property
    def attempt(self) -> int:
        return self.record.attempt

    def report(self) -> RunningJobReport:
        return RunningJobReport(job_id=self.job_id, attempt=self.attempt)

    def ended_on_its_own(self) -> bool:
        """Whether the run has ended, and not because the node's lease lapsed."""
        return (
            self.handle is not None
            and not self.handle.is_alive()
            and not leases.stopped_by_lease(self.record.job_dir)
        )

    def launch(self) -> asyncio.Task[None]:
        self.task = asyncio.create_task(self._run(), name=f"job-{self.job_id}.{self.attempt}")
        return self.task

    # --- orders ----------------------------------------------------------------

    async def stop(self, reason: StopReason, grace_seconds: float, why: str = "") -> None:
        """Stop the run (SIGTERM, grace, SIGKILL); its exit is reported as usual,
        with `why` (default: the server's stop order) as its message."""
        if self._stop_reason is None:
            self._stop_reason = reason
            self._stop_grace = grace_seconds
            self._stop_why = why or f"stopped by the server ({reason.value})"
            self.record.stop_reason = reason.value
            if self.handle is not None and not self.record.ended:
                # Kept before the signal: a restarted agent that finds the run
                # ended must not take a stopped run's exit for its own.
                self.ctx.store.save(self.record)
        await self._started.wait()
        if self.handle is not None:
            await self.handle.stop(grace_seconds)

    async def discard(self, grace_seconds: float = 5.0) -> None:
        """The server has written this run off: stop it and forget it, unreported.

        Its checkpoints stay: the server requeues a lost job, and its next
        attempt may land here again and resume from them.
        """
        self._report = False
        if self._stop_reason is None:
            self._stop_reason, self._stop_grace = StopReason.LOST, grace_seconds
            self._stop_why = "written off by the server"
        await self._started.wait()
        if self.handle is not None:
            await self.handle.stop(grace_seconds)
        await self._cancel_task()
        if self.handle is not None:
            await self.handle.cleanup()
        self.ctx.store.remove(self.record)

    async def report_late_exit(self) -> None:
        """The server wrote this run off, but it had ended on its own (while
        this agent was down, say): report that exit once, since the server
        lets it stand if the job has not run again (otherwise it is refused,
        which is final), then forget the run as `discard` does."""
        assert self.handle is not None and self.ended_on_its_own()
        await self._cancel_task()  # it may be reporting too: this takes over
        record = self.record
        if not record.ended:
            self._record_end(await self.handle.wait())
        await self._send_event(EventKind.EXITED, record.exit_code, record.exit_message)
        await self.handle.cleanup()
        self.ctx.store.remove(record)

    async def abandon(self) -> None:
        """The agent is exiting: stop following the run, leave it running."""
        await self._cancel_task()

    async def _cancel_task(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def _record_end(self, status: ExitStatus, on_its_own: bool = False) -> None:
        """Write the run's end into its record (kept until the server has it)."""
        record = self.record
        record.ended_on_its_own = on_its_own
        record.exit_code = status.exit_code
        record.exit_message = self._exit_message(status)
        record.ended_at = time.time()
        self.ctx.store.save(record)

    # --- the run ---------------------------------------------------------------

    async def _run(self) -> None:
        try:
            if self.handle is None:
                if not await self._start():
                    return
            else:
                self._started.set()
            await self._supervise()
        finally:
            self._started.set()
            if self._on_done is not None:
                self._on_done(self)

    async def _start(self) -> bool:
        """Start the assignment; False when it did not start (and that was reported)."""
        assert self.assignment is not None
        store, record = self.ctx.store, self.record
        if self._stop_reason is not None:
            await self._finish_unstarted(f"{self._stop_why} before it started")
            return False
        record.upload_checkpoint = self.assignment.upload_checkpoint
        record.checkpoint_max_bytes = self.assignment.checkpoint_max_bytes
        try:
            account = accounts.for_job(self.ctx.jobs_as, self.assignment, self.ctx.node)
        except AccountError as exc:
            log.warning("job %s cannot start: %s", self.job_id, exc)
            await self._finish_unstarted(str(exc), kind=EventKind.FAILED_TO_START)
            return False
        ref = self.assignment.checkpoint
        if ref is not None and self.assignment.checkpoint_dir is None:
            try:
                note = await checkpoints.fetch(
                    self.ctx.client,
                    self.job_id,
                    ref,
                    Path(record.checkpoint_dir),
                    None if account is None else (account.uid, account.gid),
                )
            except (checkpoints.CheckpointError, OSError) as exc:
                message = (
                    f"could not restore the job's checkpoint on {self.ctx.node!r}: {exc}; "
                    "resubmit the job, or configure a shared checkpoint path"
                )
                await self._finish_unstarted(message, kind=EventKind.FAILED_TO_START)
                return False
            if note:
                # Unpacked as the job's account's from the start (safe_extract).
                log.info("job %s: %s", self.job_id, note)
        # The record is first written once the run exists (with its pid or
        # container): a record without one could not be found again anyway.
        try:
            async with self.ctx.starts.slot():
                if self._stop_reason is not None:  # stopped while waiting its turn
                    await self._finish_unstarted(f"{self._stop_why} before it started")
                    return False
                store.create_checkpoint_dir(record, account)
                self.handle = await self.executor.start(self.assignment, record, account)
        except StartError as exc:
            log.warning("job %s failed to start: %s", self.job_id, exc)
            await self._finish_unstarted(str(exc), kind=EventKind.FAILED_TO_START)
            return False
        except Exception as exc:  # a bug or an engine failure: still tell the server
            log.exception("job %s failed to start", self.job_id)
            message = f"the agent on {self.ctx.node!r} could not start the job: {exc!r}"
            await self._finish_unstarted(message, kind=EventKind.FAILED_TO_START)
            return False
        store.save(record)
        self._started.set()
        if self._stop_reason is not None:  # a stop order came while it was starting
            await self.handle.stop(self._stop_grace)
        return True

    async def _finish_unstarted(self, message: str, kind: EventKind = EventKind.EXITED) -> None:
        record = self.record
        record.exit_message, record.ended_at = message, time.time()
        self._started.set()
        self.ctx.store.save(record)
        await self._send_event(kind, None, message)
        self.ctx.store.remove(record)

    async def _supervise(self) -> None:
        handle, record, ctx = self.handle, self.record, self.ctx
        assert handle is not None
        shipper = LogShipper(
            ctx.client,
            ctx.store,
            record,
            ctx.node,
            interval=ctx.log_interval,
            disk_cap_bytes=ctx.log_disk_cap_bytes,
        )
        tail = ProgressTail(ctx.client, ctx.store, record, ctx.node)
        pump = asyncio.create_task(handle.pump_logs(shipper.add))
        try:
            if not record.started_acked and self._report:
                await self._send_event(EventKind.STARTED, None, "")
                # Written with the next save: a repeated "started" is harmless.
                record.started_acked = True
            # Only once the server has the start: it takes a run's output and
            # progress only while it is running.
            shipper.start()
            if self._report:
                tail.start()
            status = await handle.wait()
            # Judged as the exit is seen: a stop order that comes later found
            # the run ended already.
            on_its_own = self._stop_reason is None and record.stop_reason is None
            await pump
            if leases.stopped_by_lease(record.job_dir):
                # Not the job's exit: the server learns of it as a lost node.
                self._report = False
                record.stop_reason = StopReason.LOST.value
            if not record.ended:
                self._record_end(status, on_its_own)
            if self._report:
                await shipper.finish()
                await tail.finish()
                if record.full_log_wanted and not record.full_log_sent:
                    await self._upload_full_log()
                if self._carries_checkpoint():
                    await self._carry_checkpoint()
                await self._send_event(EventKind.EXITED, record.exit_code, record.exit_message)
        finally:
            if not pump.done():
                pump.cancel()
            shipper.stop()
            tail.stop()
        await handle.cleanup()
        # A job that succeeded or was cancelled will not resume; a failed or
        # preempted one may, from its checkpoints. A preempted script exits 0
        # after saving: that is no success, and its next attempt (maybe on
        # this node, maybe starting already) needs the directory. A run that
        # ended before its stop order came was not preempted.
        preempted = not record.ended_on_its_own and record.stop_reason in (
            StopReason.PREEMPT.value,
            StopReason.LOST.value,
        )
        if (record.exit_code == 0 and not preempted) or self._stop_reason is StopReason.CANCEL:
            ctx.store.remove_checkpoints(record)
        ctx.store.remove(record)

    async def _upload_full_log(self) -> None:
        """The server cut this job's stored log: give it the whole of this run's
        output before the exit is reported (the run's directory goes after)."""
        record = self.record
        note = await upload_full(self.ctx.client, record, self.ctx.node)
        if note:
            record.exit_message = f"{record.exit_message}; {note}" if record.exit_message else note
        self.ctx.store.save(record)

    def _carries_checkpoint(self) -> bool:
        record = self.record
        return (
            record.upload_checkpoint
            and record.stop_reason == StopReason.PREEMPT.value
            and not record.ended_on_its_own  # ended before the order: it stands
            and "checkpoint" not in record.exit_message  # not carried already
        )

    async def _carry_checkpoint(self) -> None:
        """Upload the checkpoint of a preempted run; the exit message says how it went.

        Only then is the exit reported, so the server requeues the job with
        its checkpoint in hand. A failed upload is said in the message (and
        so in the job's history): the job then resumes from the last
        checkpoint the server holds, or from the start, and the newer one
        stays on this node.
        """
        record = self.record
        try:
            note = await checkpoints.upload(
                self.ctx.client,
                record.job_id,
                record.attempt,
                self.ctx.node,
                Path(record.checkpoint_dir),
                Path(record.job_dir),
                record.checkpoint_max_bytes,
            )
        except (checkpoints.CheckpointError, OSError) as exc:
            log.warning("job %s: checkpoint upload failed: %s", record.job_id, exc)
            note = (
                f"checkpoint upload failed: {exc}; it stays in {record.checkpoint_dir} on "
                f"{self.ctx.node!r}, and the job resumes from the last checkpoint the server "
                "holds (or from the start)"
            )
        record.exit_message = f"{record.exit_message}; {note}" if record.exit_message else note
        self.ctx.store.save(record)

    def _exit_message(self, status: ExitStatus) -> str:
        if self._stop_reason is not None:
            why = self._stop_why
            return f"{why}; {status.message}" if status.message else why
        return status.message

    async def _send_event(self, kind: EventKind, exit_code: int | None, message: str) -> None:
        if not self._report:
            return
        record = self.record
        # Not validated here: every value is the agent's own, typed, with the
        # message cut to size and cleaned of NUL. The server validates the
        # batch it receives; building (and walking) each report twice cost
        # about 5% of an agent's CPU under `bench/api_load.py`.
        await self.ctx.events.send(
            JobEventReport.model_construct(
                job_id=record.job_id,
                attempt=record.attempt,
                node=self.ctx.node,
                kind=kind,
                exit_code=exit_code,
                message=message[:4000].replace("\x00", "\ufffd"),
                at=record.ended_at
                if kind is not EventKind.STARTED and record.ended_at
                else time.time(),
                on_its_own=kind is EventKind.EXITED and record.ended_on_its_own,
            )
        )
