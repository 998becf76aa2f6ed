"""The node agent's main loop: register, heartbeat, long-poll for work, run jobs.

`Agent.run()` is the whole life of an agent process:

0. enroll: with a join token, exchange it for this node's credential
   and keep that in the state directory (`agent.credential`);
1. recover: ask every executor which runs of earlier agent processes are
   still on this host (state records; containers by label);
2. register with the server, listing them; the reply says which the
   server still counts as running here (re-adopted: followed again, their
   exits reported) and which it has written off (stopped, unreported);
3. heartbeat every `heartbeat_seconds` (GPU samples, running jobs) from
   a thread of its own (`agent.heartbeat`: a busy loop never delays it),
   and register again when the server says it does not know this node;
4. long-poll for work and act on it at once: a start becomes a
   `JobRunner` task, a stop order is passed to the runner;
5. hold the node's lease (`agent.leasekeeper`): every reply renews it,
   and a guard process (`agent.leaseguard`) stops the node's jobs when it
   lapses, whether this agent is frozen, dead or cut off from the server.
   An agent that finds its lease lapsed stops its jobs too, and registers
   again before anything else: the server then counts those runs as lost
   to a node failure, never as the jobs' own exits.

The server being down never kills the agent: every call is retried with
backoff, and job reports wait in their runners (and on disk) until the
server acknowledges them. A refused token does stop it, with a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Coroutine
from typing import Any

from schedulearn.agent import accounts, credential
from schedulearn.agent import lease as leases
from schedulearn.agent.accounts import Account, JobsAs
from schedulearn.agent.client import (
    AgentClient,
    AuthRejected,
    ProtocolRefused,
    Rejected,
)
from schedulearn.agent.config import AgentConfig
from schedulearn.agent.executors import registry
from schedulearn.agent.executors.base import ExecutorImpl, NewRecord, RunHandle, StartError
from schedulearn.agent.gpus import GpuSource
from schedulearn.agent.heartbeat import HeartbeatThread
from schedulearn.agent.jobs import JobRunner, RunnerContext
from schedulearn.agent.lease import Lease
from schedulearn.agent.leasekeeper import LeaseKeeper
from schedulearn.agent.outbox import EventOutbox
from schedulearn.agent.retry import Retry, Stopped
from schedulearn.agent.starts import StartGate
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.core.capabilities import ExecutorKind
from schedulearn.protocol import (
    Assignment,
    CapabilitiesReport,
    Executor,
    Heartbeat,
    HeartbeatReply,
    NodeRegistration,
    RegistrationReply,
    RunningJobReport,
    StopOrder,
    StopReason,
    WorkBatch,
)

log = logging.getLogger(__name__)


class AgentError(RuntimeError):
    """The agent cannot go on; the message says what to change."""


class Agent:
    """One node's agent. Build it, then `await run(stop)`; set `stop` to exit."""

    def __init__(
        self,
        config: AgentConfig,
        gpus: GpuSource,
        executors: dict[Executor, ExecutorImpl],
        client: AgentClient | None = None,
    ) -> None:
        self.config = config
        self.gpus = gpus
        self.executors = executors
        check_jobs_as(config)
        # What confines process jobs here (the node reports it; `schedulearn nodes`
        # shows it): their executor's cgroups, else the container engine's.
        first = executors.get(Executor.SUBPROCESS) or next(iter(executors.values()), None)
        self.containment = first.containment if first is not None else "none"
        for executor in executors.values():
            describe = getattr(executor, "describe_containment", None)
            if describe is not None:
                log.info("containment of %s jobs: %s", executor.kind.value, describe())
        self.capabilities = registry.capabilities(
            executors.values(), config.labels, self._accounts()
        )
        self.client = client or AgentClient(config.server, config.token)
        self.token = config.token  # the heartbeat thread's client uses it too
        self.store = StateStore(config.state_dir)
        self.events = EventOutbox(self.client)
        self.ctx = RunnerContext(
            self.client,
            self.events,
            self.store,
            config.name,
            jobs_as=config.jobs_as,
            starts=StartGate(
                config.max_concurrent_starts, config.max_starts_per_second, config.start_burst
            ),
            log_disk_cap_bytes=config.log_disk_max_bytes,
        )
        self.runners: dict[int, JobRunner] = {}
        self.heartbeat_seconds = 5.0
        self._registered = asyncio.Event()
        self._register_lock = asyncio.Lock()
        self._fatal: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.lease = LeaseKeeper(config.state_dir, on_lapse=self._lapse_from_thread)

    # --- life ------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set; raises `AgentError` if the server refuses the agent."""
        self._loop = asyncio.get_running_loop()
        self._fatal = self._loop.create_future()
        tasks: list[asyncio.Task[None]] = []
        heartbeat: HeartbeatThread | None = None
        try:
            if not await self._enroll(stop):
                return
            recovered = await self._recover()
            await self._end_lease_stopped(recovered)
            await self._register(recovered, wait_for=stop)
            if stop.is_set():
                return
            log.info(
                "agent %s registered with %s: %d GPUs, executors %s, containment %s",
                self.config.name,
                self.config.server,
                len(self.gpus.inventory()),
                ",".join(e.value for e in self.executors),
                self.containment,
            )
            tasks = [asyncio.create_task(self._guard(self._poll_loop()), name="poll")]
            heartbeat = self._heartbeat_thread()
            heartbeat.start()
            stopping = asyncio.ensure_future(stop.wait())
            waited: list[asyncio.Future[Any]] = [stopping, self._fatal]
            await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if self._fatal.done() and (fatal := self._fatal.exception()) is not None:
                raise fatal
        finally:
            if heartbeat is not None:
                await asyncio.to_thread(heartbeat.stop)
            tasks += self._tasks
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._shutdown()

    async def _guard(self, loop: Coroutine[Any, Any, None]) -> None:
        """Run a loop; an error it cannot recover from ends the agent."""
        try:
            await loop
        except asyncio.CancelledError:
            raise
        except AuthRejected as exc:
            self._fail(AgentError(_token_refused(self.config.server, exc)))
        except ProtocolRefused as exc:
            self._fail(AgentError(_protocol_refused(self.config.server, exc)))
        except AgentError as exc:
            self._fail(exc)
        except Exception as exc:
            log.exception("agent loop failed")
            self._fail(AgentError(f"agent loop failed: {exc!r}"))

    def _fail(self, exc: BaseException) -> None:
        if self._fatal is not None and not self._fatal.done():
            self._fatal.set_exception(exc)

    async def _shutdown(self) -> None:
        try:
            await self._stop_runners()
        finally:
            # Runs left behind (an upgrade) keep the lease's guard: if no agent
            # renews the lease, they are stopped before the server requeues them.
            # Any record counts: runs of an earlier agent not re-adopted yet too.
            self.lease.close(jobs_left=bool(self.runners) or bool(self.store.load_all()))
        await asyncio.gather(*(r.abandon() for r in list(self.runners.values())))
        await self.events.close()
        for executor in self.executors.values():
            with contextlib.suppress(Exception):
                await executor.close()
        await self.client.close()
        self.gpus.close()
        self.store.close()

    async def _stop_runners(self) -> None:
        runners = list(self.runners.values())
        if self.config.stop_jobs_on_exit and runners:
            log.info("stopping %d jobs before exiting", len(runners))
            grace = self.config.exit_grace_seconds
            why = f"stopped because the agent on {self.config.name!r} shut down"
            await asyncio.gather(
                *(r.stop(StopReason.PREEMPT, grace, why) for r in runners), return_exceptions=True
            )
            # Give the exit reports a moment; unsent ones stay on disk for next time.
            pending = [r.task for r in runners if r.task is not None]
            if pending:
                await asyncio.wait(pending, timeout=5.0)

    def _accounts(self) -> frozenset[str] | None:
        """The accounts this node runs jobs as (None: every job as the agent itself)."""
        return accounts.node_accounts() if self.config.jobs_as is JobsAs.OWNER else None

    async def _report_new_accounts(self) -> None:
        """Register again when accounts were added or removed on this host, so the
        scheduler places jobs by the accounts the node has now."""
        now = self._accounts()
        if now == self.capabilities.accounts:
            return
        self.capabilities = dataclasses.replace(self.capabilities, accounts=now)
        log.info("this node's unix accounts changed; registering again to report them")
        await self._register()

    # --- enrollment ------------------------------------------------------------

    async def _enroll(self, stop: asyncio.Event) -> bool:
        """Exchange the join token, unless the stored credential came from it; False if stopped."""
        join_token = self.config.join_token
        if not join_token:
            return True
        digest = credential.join_digest(join_token)
        stored = credential.load(self.config.state_dir)
        if stored is not None and stored.join_digest == digest and stored.node == self.config.name:
            log.info("node %s is enrolled with this join token already", self.config.name)
            self.client.set_token(stored.credential)
            self.token = stored.credential
            return True
        retry = Retry(f"join {self.config.server}", stop=stop)
        try:
            joined = await retry.run(lambda: self.client.join(join_token))
        except Stopped:
            return False
        except AuthRejected as exc:
            raise AgentError(
                f"the server {self.config.server} refused the join token: {exc.message}"
            ) from exc
        except ProtocolRefused as exc:
            raise AgentError(_protocol_refused(self.config.server, exc)) from exc
        except Rejected as exc:
            raise AgentError(f"the server refused the join token: {exc}") from exc
        if joined.node != self.config.name:
            raise AgentError(
                f"that join token is for node {joined.node!r}, but this agent is "
                f"{self.config.name!r}; start it with --name {joined.node}, or ask for a join "
                f"token for {self.config.name!r} (`schedulearn node add {self.config.name}`)"
            )
        path = credential.save(
            self.config.state_dir,
            credential.StoredCredential(joined.node, joined.credential, digest),
        )
        log.info("node %s enrolled; its credential is kept in %s", joined.node, path)
        self.client.set_token(joined.credential)
        self.token = joined.credential
        return True

    # --- registration ----------------------------------------------------------

    async def _recover(self) -> list[RunHandle]:
        for stale in self.store.stale_dirs():
            shutil.rmtree(stale, ignore_errors=True)
        records = self.store.load_all()
        handles: list[RunHandle] = []
        for executor in self.executors.values():
            handles.extend(await executor.recover(records, self._record_for_orphan))
        found = {(h.record.job_id, h.record.attempt) for h in handles}
        for record in records:
            if (record.job_id, record.attempt) not in found:
                log.warning(
                    "job %s (attempt %s) ran under the %s executor, which this agent does "
                    "not offer; start the agent with --executor %s to re-adopt it",
                    record.job_id,
                    record.attempt,
                    record.executor.value,
                    record.executor.value,
                )
        if handles:
            log.info("found %d runs of an earlier agent process", len(handles))
        return handles

    async def _end_lease_stopped(self, recovered: list[RunHandle]) -> None:
        """Wait for the runs the lease's guard is stopping to be gone: registering
        without them lets the server run them elsewhere at once."""
        lease = leases.read(self.config.state_dir)
        grace = lease.grace if lease is not None else 0.0
        dying = [h for h in recovered if h.is_alive() and leases.stopped_by_lease(h.record.job_dir)]
        if dying:
            log.info("waiting for %d runs stopped by the lapsed lease to end", len(dying))
            await asyncio.gather(*(h.stop(grace) for h in dying))

    def _record_for_orphan(self, job_id: int, attempt: int, container_id: str) -> JobRecord:
        job_dir = self.store.create_job_dir(job_id, attempt)
        record = JobRecord(
            job_id=job_id,
            attempt=attempt,
            executor=Executor.DOCKER,
            job_dir=str(job_dir),
            checkpoint_dir=str(self.store.default_checkpoint_dir(job_id)),
            started_at=time.time(),
            container_id=container_id,
        )
        self.store.save(record)
        return record

    def registration(self, recovered: list[RunHandle]) -> NodeRegistration:
        running = [r.report() for r in self.runners.values()]
        running += [
            RunningJobReport(job_id=h.record.job_id, attempt=h.record.attempt)
            for h in recovered
            # A run the lease's guard stopped is not reported: the server counts it
            # lost with its node, and runs the job again.
            if h.record.job_id not in self.runners and not leases.stopped_by_lease(h.record.job_dir)
        ]
        return NodeRegistration(
            name=self.config.name,
            address=self.config.address,
            gpus=self.gpus.inventory(),
            cpus=self.config.cpus,
            memory_gb=self.config.memory_gb,
            executors=list(self.executors),
            capabilities=CapabilitiesReport.model_validate(self.capabilities.as_dict()),
            running=running,
            containment=self.containment,
        )

    async def _register(
        self, recovered: list[RunHandle] | None = None, wait_for: asyncio.Event | None = None
    ) -> None:
        """Register (again), retrying until the server answers, and act on its reply."""
        recovered = recovered or []
        async with self._register_lock:
            self._registered.clear()
            retry = Retry(f"register with {self.config.server}", stop=wait_for)
            sent_at = leases.now()

            async def register() -> RegistrationReply:
                nonlocal sent_at
                sent_at = leases.now()
                return await self.client.register(self.registration(recovered))

            try:
                reply = await retry.run(register)
            except Stopped:
                return
            except AuthRejected as exc:
                raise AgentError(_token_refused(self.config.server, exc)) from exc
            except ProtocolRefused as exc:
                raise AgentError(_protocol_refused(self.config.server, exc)) from exc
            except Rejected as exc:
                raise AgentError(f"the server refused to register this node: {exc}") from exc
            self.lease.reset(granted(reply, sent_at))
            await self._apply_registration(reply, recovered)
            self._registered.set()

    async def _apply_registration(
        self, reply: RegistrationReply, recovered: list[RunHandle]
    ) -> None:
        self.heartbeat_seconds = max(0.2, reply.heartbeat_seconds)
        adopt = set(reply.adopt) - set(reply.lost)
        written_off: list[JobRunner] = []
        for handle in recovered:
            record = handle.record
            runner = JobRunner(
                self.ctx,
                self.executors[record.executor],
                record,
                handle=handle,
                on_done=self._done,
            )
            if record.job_id in adopt and record.job_id not in self.runners:
                log.info("re-adopted job %s (attempt %s)", record.job_id, record.attempt)
                self.runners[record.job_id] = runner
                runner.launch()
            else:
                written_off.append(runner)
        for job_id, runner in list(self.runners.items()):
            if job_id not in adopt:
                # Registering again after the server marked this node down:
                # it has requeued these jobs, maybe onto other nodes.
                self.runners.pop(job_id)
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

    # --- work ------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        retry = Retry(f"get work from {self.config.server}")
        while True:
            await self._registered.wait()
            try:
                batch = await retry.run(
                    lambda: self.client.work(self.config.name, self.config.poll_wait_seconds)
                )
            except (AuthRejected, ProtocolRefused):
                raise
            except Rejected as exc:
                if exc.status == 404:
                    if not self.lease.check():
                        await self._register()
                else:
                    log.warning("the server refused a work request: %s", exc)
                    await retry.pause(exc)
                continue
            self.handle_work(batch)

    def handle_work(self, batch: WorkBatch) -> None:
        for assignment in batch.starts:
            self._start(assignment)
        for order in batch.stops:
            self._background(self._stop(order))

    def _start(self, assignment: Assignment) -> None:
        if self.lease.lapsed:
            # Registering again says it does not run here; the server places it anew.
            log.info("lease lapsed: not starting job %s", assignment.job_id)
            return
        old = self.runners.get(assignment.job_id)
        if old is not None and old.attempt >= assignment.attempt:
            return  # delivered twice, or an older attempt than the one running
        # By name, else this agent's executor of the kind the job needs (the
        # server places by kind: a job with an image on a node running containers).
        needs = ExecutorKind.CONTAINER if assignment.image else ExecutorKind.PROCESS
        executor = (
            self.executors.get(assignment.executor)
            or next((e for e in self.executors.values() if e.runs is needs), None)
            or _Unoffered(assignment.executor, self.config.name)
        )
        job_dir = self.store.create_job_dir(assignment.job_id, assignment.attempt)
        checkpoint = assignment.checkpoint_dir or str(
            self.store.default_checkpoint_dir(assignment.job_id)
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
        runner = JobRunner(self.ctx, executor, record, assignment=assignment, on_done=self._done)
        self.runners[assignment.job_id] = runner
        if old is None:
            runner.launch()
        else:
            # A newer attempt of a job whose old run is still here: the old
            # one is obsolete, and must let go of the GPUs first.
            self._background(self._replace(old, runner))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _replace(self, old: JobRunner, new: JobRunner) -> None:
        await old.discard()
        new.launch()

    async def _stop(self, order: StopOrder) -> None:
        runner = self.runners.get(order.job_id)
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
        if self.runners.get(runner.job_id) is runner:
            del self.runners[runner.job_id]

    # --- heartbeats ------------------------------------------------------------

    def _heartbeat_thread(self) -> HeartbeatThread:
        """Heartbeats from their own thread (`agent.heartbeat`); replies come back here."""
        loop = asyncio.get_running_loop()
        return HeartbeatThread(
            self.config.server,
            token=lambda: self.token,
            body=self._heartbeat_body,
            interval=lambda: self.heartbeat_seconds,
            on_reply=lambda reply: loop.call_soon_threadsafe(self._on_heartbeat, reply),
            on_error=lambda exc: loop.call_soon_threadsafe(self._on_heartbeat_error, exc),
            lease=self.lease,
        )

    def _heartbeat_body(self) -> Heartbeat | None:
        """Called in the heartbeat thread: reads the runners without waiting for the loop."""
        if not self._registered.is_set():
            return None
        for _ in range(3):
            try:
                runners = tuple(self.runners.values())
                break
            except RuntimeError:  # changed while read; read again
                continue
        else:
            return None
        return Heartbeat(
            name=self.config.name,
            gpus=self.gpus.sample(),
            running=[r.report() for r in runners],
        )

    def _on_heartbeat(self, reply: HeartbeatReply) -> None:
        self.heartbeat_seconds = max(0.2, reply.heartbeat_seconds)
        if reply.reregister:
            log.info("the server asked this node to register again")
            self._register_unless_lapsed()
        else:
            self._background(self._guard(self._report_new_accounts()))

    # --- the lease -------------------------------------------------------------

    def _register_unless_lapsed(self) -> None:
        """Register again (the server no longer knows this node), unless the
        lease has lapsed: then the lapse goes first, since it stops the runs
        the guard stops and registers without them. An agent that hung (stopped,
        swapped out) learns both at once, and a plain registration would give
        it a fresh lease and hide the lapse."""
        if not self.lease.check():
            self._background(self._guard(self._register()))

    def _lapse_from_thread(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._background, self._guard(self._lease_lapsed()))

    async def _lease_lapsed(self) -> None:
        """Stop every run that had not ended (the guard is stopping them too), then
        register again: the server counts them lost with this node. Runs that
        ended on their own before are kept, so their exits are still reported."""
        self._registered.clear()
        lease = self.lease.lease
        grace = lease.grace if lease is not None else 0.0
        doomed = [r for r in self.runners.values() if not r.ended_on_its_own()]
        why = "stopped because this node's lease lapsed (the agent could not reach the server)"
        for runner in doomed:
            self.runners.pop(runner.job_id, None)
            with contextlib.suppress(OSError):
                leases.mark_stopped(runner.record.job_dir, why)
            log.warning("lease lapsed: stopping job %s (attempt %s)", runner.job_id, runner.attempt)
        await asyncio.gather(*(r.discard(grace) for r in doomed))
        await self._register()
        log.info("registered again after the lease lapsed; %d jobs kept", len(self.runners))

    def _on_heartbeat_error(self, exc: Exception) -> None:
        if isinstance(exc, AuthRejected):
            self._fail(AgentError(_token_refused(self.config.server, exc)))
        elif isinstance(exc, ProtocolRefused):
            self._fail(AgentError(_protocol_refused(self.config.server, exc)))
        elif isinstance(exc, Rejected) and exc.status == 404:
            self._register_unless_lapsed()
        else:
            log.warning("the server refused a heartbeat: %s", exc)


def granted(reply: RegistrationReply, sent_at: float) -> Lease | None:
    """The lease a registration reply grants (None: the server grants none)."""
    if reply.lease_seconds is None:
        return None
    return Lease.granted(sent_at, reply.lease_seconds, reply.lease_grace_seconds)


def check_jobs_as(config: AgentConfig) -> None:
    """`AgentError` when the agent cannot run jobs as `config.jobs_as` says."""
    if config.jobs_as is not JobsAs.OWNER:
        return
    if os.geteuid() != 0:
        raise AgentError(
            "running jobs as their owners' unix accounts needs an agent started as root; "
            "start it as root, or pass --run-jobs-as agent to run every job as this user"
        )
    closed = accounts.unreachable_ancestor(config.state_dir)
    if closed is not None:
        raise AgentError(
            f"jobs run as their owners must reach their files under the state directory "
            f"{config.state_dir}, but {closed} is closed to other users; pass a --state-dir "
            f"elsewhere (e.g. /var/lib/schedulearn/agent) or `chmod o+x {closed}`"
        )


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


def _protocol_refused(server: str, exc: Rejected) -> str:
    return f"the server {server} refused this agent: {exc.message}"


def _token_refused(server: str, exc: Rejected) -> str:
    return (
        f"the server {server} refused this node's credential (HTTP {exc.status}: {exc.message}); "
        "stopping. If the node was removed or its credential revoked, an admin enrolls it "
        "again with `schedulearn node add NAME`; start the agent with that join token "
        "(--join-token-file or SCHEDULEARN_JOIN_TOKEN)"
    )
