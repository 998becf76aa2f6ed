"""The agent's life: build its parts, run them, and shut down.

`Agent.run()` is the whole life of an agent process, each step in a
module of its own:

0. enrol (`agent.enrolment`): with a join token, exchange it for this
   node's credential and keep that in the state directory;
1. recover (`agent.recovery`): ask every executor which runs of earlier
   agent processes are still on this host (state records; containers by
   label);
2. register with the server, listing them (`registration`, here); the
   reply says which the server still counts as running here (re-adopted
   by the set of runners, `agent.runners`: followed again, their exits
   reported) and which it has written off (stopped, unreported);
3. heartbeat every `heartbeat_seconds` (GPU samples, running jobs) from
   a thread of its own (`agent.heartbeat`: a busy loop never delays it),
   and register again when the server says it does not know this node;
4. the work loop (`agent.workloop`): long-poll for work and act on it at
   once: a start becomes a `JobRunner` in the set of runners, a stop
   order is passed to its runner;
5. hold the node's lease (`agent.leasekeeper`): every reply renews it,
   and a guard process (`agent.leaseguard`) stops the node's jobs when it
   lapses, whether this agent is frozen, dead or cut off from the server.
   An agent that finds its lease lapsed stops its jobs too, and registers
   again before anything else: the server then counts those runs as lost
   to a node failure, never as the jobs' own exits.

The server being down never kills the agent: every call is retried with
backoff, and job reports wait in their runners (and on disk) until the
server acknowledges them. A refused token does stop it, with a message
(`agent.errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from collections.abc import Coroutine
from typing import Any

from schedulearn.agent import accounts, recovery
from schedulearn.agent import lease as leases
from schedulearn.agent.accounts import JobsAs
from schedulearn.agent.client import (
    AgentClient,
    AuthRejected,
    ProtocolRefused,
    Rejected,
)
from schedulearn.agent.config import AgentConfig
from schedulearn.agent.enrolment import enroll
from schedulearn.agent.errors import AgentError, protocol_refused, token_refused
from schedulearn.agent.executors import registry
from schedulearn.agent.executors.base import ExecutorImpl, RunHandle
from schedulearn.agent.gpus import GpuSource
from schedulearn.agent.heartbeat import HeartbeatThread
from schedulearn.agent.jobs import RunnerContext
from schedulearn.agent.lease import Lease
from schedulearn.agent.leasekeeper import LeaseKeeper
from schedulearn.agent.outbox import EventOutbox
from schedulearn.agent.retry import Retry, Stopped
from schedulearn.agent.runners import Runners
from schedulearn.agent.starts import StartGate
from schedulearn.agent.state import StateStore
from schedulearn.agent.workloop import WorkLoop
from schedulearn.protocol import (
    CapabilitiesReport,
    Executor,
    Heartbeat,
    HeartbeatReply,
    NodeRegistration,
    RegistrationReply,
    RunningJobReport,
)

log = logging.getLogger(__name__)


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
        ctx = RunnerContext(
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
        self.runners = Runners(ctx, executors, self._background)
        self.heartbeat_seconds = 5.0
        self._work: WorkLoop | None = None
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
            token = await enroll(self.config, self.client, stop)
            if token is None:
                return
            self.token = token
            recovered = await recovery.recover(self.store, self.executors)
            await recovery.end_lease_stopped(self.config.state_dir, recovered)
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
            work = WorkLoop(
                self.config,
                self.client,
                self.runners,
                self.lease,
                self._registered,
                self._register,
                self._background,
            )
            self._work = work
            tasks = [asyncio.create_task(self._guard(work.run()), name="poll")]
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
            self._fail(AgentError(token_refused(self.config.server, exc)))
        except ProtocolRefused as exc:
            self._fail(AgentError(protocol_refused(self.config.server, exc)))
        except AgentError as exc:
            self._fail(exc)
        except Exception as exc:
            log.exception("agent loop failed")
            self._fail(AgentError(f"agent loop failed: {exc!r}"))

    def _fail(self, exc: BaseException) -> None:
        if self._fatal is not None and not self._fatal.done():
            self._fatal.set_exception(exc)

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in a task of its own, cancelled when the agent exits."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _shutdown(self) -> None:
        try:
            if self.config.stop_jobs_on_exit:
                why = f"stopped because the agent on {self.config.name!r} shut down"
                await self.runners.stop_all(self.config.exit_grace_seconds, why)
        finally:
            # Runs left behind (an upgrade) keep the lease's guard: if no agent
            # renews the lease, they are stopped before the server requeues them.
            # Any record counts: runs of an earlier agent not re-adopted yet too.
            self.lease.close(jobs_left=len(self.runners) > 0 or bool(self.store.load_all()))
        await self.runners.abandon_all()
        await self.events.close()
        for executor in self.executors.values():
            with contextlib.suppress(Exception):
                await executor.close()
        await self.client.close()
        self.gpus.close()
        self.store.close()

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

    # --- registration ----------------------------------------------------------

    def registration(self, recovered: list[RunHandle]) -> NodeRegistration:
        running = self.runners.reports()
        running += [
            RunningJobReport(job_id=h.record.job_id, attempt=h.record.attempt)
            for h in recovery.still_running(recovered)
            if h.record.job_id not in self.runners
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
                raise AgentError(token_refused(self.config.server, exc)) from exc
            except ProtocolRefused as exc:
                raise AgentError(protocol_refused(self.config.server, exc)) from exc
            except Rejected as exc:
                raise AgentError(f"the server refused to register this node: {exc}") from exc
            self.lease.reset(granted(reply, sent_at))
            self.heartbeat_seconds = max(0.2, reply.heartbeat_seconds)
            await self.runners.adopt(recovered, set(reply.adopt) - set(reply.lost))
            self._registered.set()

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
        # Read before the runners: every run of that batch is then among them.
        work_through = self._work.work_through if self._work is not None else None
        runners = self.runners.snapshot()
        if runners is None:
            return None
        return Heartbeat(
            name=self.config.name,
            gpus=self.gpus.sample(),
            running=[r.report() for r in runners],
            work_through=work_through,
        )

    def _on_heartbeat(self, reply: HeartbeatReply) -> None:
        self.heartbeat_seconds = max(0.2, reply.heartbeat_seconds)
        if reply.reregister:
            log.info("the server asked this node to register again")
            self._register_unless_lapsed()
        else:
            self._background(self._guard(self._report_new_accounts()))

    def _on_heartbeat_error(self, exc: Exception) -> None:
        if isinstance(exc, AuthRejected):
            self._fail(AgentError(token_refused(self.config.server, exc)))
        elif isinstance(exc, ProtocolRefused):
            self._fail(AgentError(protocol_refused(self.config.server, exc)))
        elif isinstance(exc, Rejected) and exc.status == 404:
            self._register_unless_lapsed()
        else:
            log.warning("the server refused a heartbeat: %s", exc)

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
        await self.runners.stop_for_lapse(lease.grace if lease is not None else 0.0)
        await self._register()
        log.info("registered again after the lease lapsed; %d jobs kept", len(self.runners))


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
