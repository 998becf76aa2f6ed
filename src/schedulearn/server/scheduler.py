"""The live scheduler loop: wakes on events or a tick, runs one pass at a time.

Owns the policy object in force. Each round it (1) marks silent nodes
down, (2) rebuilds the policy if the stored spec changed (a switch is in
force from the next pass, no restart), (3) runs `services.scheduling.
run_pass`, and wakes the agents it gave work to. Wake-ups that arrive
during a pass coalesce into one more pass, so a burst of submissions
costs a few passes, not one each.

With PostgreSQL several API replicas may run; only the one holding the
advisory lock `LEADER_LOCK` schedules, the others serve the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlalchemy.pool import PoolProxiedConnection
from sqlmodel import Session

from schedulearn.clock import Clock
from schedulearn.core import Decision, Policy
from schedulearn.core.fairshare import FairShare
from schedulearn.server.db import Database
from schedulearn.server.errors import Unavailable
from schedulearn.server.heartbeat_pace import HeartbeatPace
from schedulearn.server.metrics import Metrics
from schedulearn.server.services import (
    agents,
    checkpoints,
    full_logs,
    goodput,
    live_views,
    logs,
    policy,
    profiles,
    queues,
    scheduling,
    snapshot,
    timelimits,
)
from schedulearn.server.wakeups import Changes, Wakeups, wait_for
from schedulearn.settings import ServerSettings

log = logging.getLogger(__name__)
LEADER_LOCK = 0x5C4ED  # any constant shared by all replicas
PRUNE_SECONDS = 30.0  # how often checkpoints of finished jobs are deleted
# The longest rest after a pass (`Scheduler.loop`): a pass slower than this
# takes more than half of the database threads' time, not free-to-start waits.
MAX_REST_SECONDS = 2.0


@dataclass(slots=True)
class Round:
    changes: Changes
    result: scheduling.PassResult | None
    spec: str


@dataclass(slots=True)
class _Reading:
    """A round read and waiting for its policy's decision (`Scheduler._read`)."""

    changes: Changes
    spec: str
    now: float
    tenanted: bool
    started: float  # perf_counter at the pass's start, for the pass metric
    policy: Policy
    prepared: scheduling.Prepared | None = None


class Scheduler:
    def __init__(
        self,
        db: Database,
        wakeups: Wakeups,
        settings: ServerSettings,
        clock: Clock,
        metrics: Metrics,
        shape: snapshot.ShapeCache | None = None,
        pace: HeartbeatPace | None = None,
    ) -> None:
        self.db = db
        self.wakeups = wakeups
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.shape = shape or snapshot.ShapeCache()
        # The node timeout in force, stretched with the cluster (`heartbeat_pace`).
        self.pace = pace or HeartbeatPace.of(settings)
        self.started_at = clock.now()
        # Which silent nodes this replica has not heard from either (its
        # `HeartbeatBook`, whose heartbeats may not be written yet); None: all.
        self.claim: Callable[[Iterable[str], float], set[str]] | None = None
        self.spec = ""
        self.policy: Policy | None = None
        self.profiles_mark: tuple[int, float] | None = None
        self.tenanted = False  # tenant queues declared: the policy runs in FairShare
        self.passes = 0
        # The queue, the running jobs and the nodes as views, kept between passes.
        self.kept = live_views.Kept()
        self._leader_conn: PoolProxiedConnection | None = None
        self._pruned_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._round_running: asyncio.Future[Round] | None = None  # the loop's, on a database thread
        self._turned_at = time.monotonic()  # the loop's last turn, for `alive`
        self._outage = False  # the last round found the database unavailable

    # --- the PostgreSQL leader lock ---------------------------------------

    def _is_leader(self) -> bool:
        if self.db.is_sqlite:
            return True  # one process owns an SQLite file
        if self._leader_conn is not None:
            # The lock lives as long as its connection: one broken by a
            # database restart no longer holds it, so try to take it again.
            try:
                cur = self._leader_conn.cursor()
                cur.execute("SELECT 1")
                cur.fetchone()
                self._leader_conn.commit()
                return True
            except Exception:
                log.warning("lost the leader connection; taking the scheduler lock again")
                self._let_go()
        conn = self.db.engine.raw_connection()
        cur = conn.cursor()
        cur.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK,))
        got = bool(cur.fetchone()[0])  # type: ignore[index]  # DB-API fetchone() is Optional; this SELECT always returns one row
        conn.commit()
        if got:
            self._leader_conn = conn  # held for the life of the process
        else:
            conn.close()
        return got

    def _let_go(self) -> None:
        """Give up the advisory lock and drop the leader connection.

        The explicit unlock frees the lock before this returns: a closed
        socket alone leaves it to the database's backend process, which lets
        go of its locks only as it exits, a moment later. `close()` on a
        pooled connection would only return it to the pool, where the
        session lives on; `invalidate()` ends the session itself."""
        if self._leader_conn is None:
            return
        with contextlib.suppress(Exception):  # a broken connection holds no lock
            cur = self._leader_conn.cursor()
            cur.execute("SELECT pg_advisory_unlock(%s)", (LEADER_LOCK,))
            self._leader_conn.commit()
        with contextlib.suppress(Exception):
            self._leader_conn.invalidate()
        self._leader_conn = None

    # --- one round ----------------------------------------------------------

    def _wrap(self, built: Policy) -> Policy:
        """`built` (or the policy a FairShare holds) in the fair-share layer when
        queues are declared, else alone."""
        inner = built.inner if isinstance(built, FairShare) else built
        if not self.tenanted:
            return inner
        return FairShare(inner, min_run=self.settings.queue_min_run_seconds)

    def _read(self, session: Session, decide_here: bool | None = False) -> Round | _Reading:
        """A round up to the policy's decision: a whole `Round` when there is
        nothing to decide, else what `_write` needs once the policy has decided.

        `decide_here`: decide and write in this session too; None: only if no
        request waits for a database thread (then nothing is gained by
        deciding elsewhere, and the two hand-overs between threads cost a
        few milliseconds of latency on a lightly loaded server)."""
        now = self.clock.now()
        if self.pace.due(now):
            # Every replica: each names the interval to the agents it answers.
            self.pace.observe(agents.healthy_nodes(session), now)
        if not self._is_leader():
            return Round(Changes(), None, self.spec)
        if self._outage:
            # The database was down: heartbeats could not be stored, so silence
            # until now is not the nodes' fault (like the server's own downtime).
            log.info("database back; scheduling again")
            self.started_at = now
            self._outage = False
        changes = agents.reap(session, now, self.pace.node_timeout, self.started_at, self.claim)
        # Runs past their `--time` end now (timeout), before the pass.
        changes = changes.merge(timelimits.enforce(session, now))
        spec = policy.current_spec(session, self.settings.default_policy)
        # A policy that takes throughput profiles (similarity) is rebuilt with
        # the live ones when they change (issue 6).
        marked = profiles.mark(session) if profiles.takes_profiles(spec) else None
        # With tenant queues declared, the policy runs inside the fair-share
        # layer (core.fairshare: it picks the queue, the policy orders inside
        # it); with none, alone, exactly as before queues existed.
        tenanted = queues.declared(session)
        if (
            spec != self.spec
            or self.policy is None
            or marked != self.profiles_mark
            or tenanted != self.tenanted
        ):
            self.profiles_mark = marked
            self.tenanted = tenanted
            try:
                table = profiles.live_table(session) if marked is not None else None
                self.policy = self._wrap(
                    policy.build(
                        spec,
                        self.settings.min_resize_age_seconds,
                        **profiles.policy_overrides(spec, table),
                    )
                )
            except Exception:
                log.exception("stored policy %r is invalid; keeping %r", spec, self.spec)
                self.policy = self._wrap(self.policy or policy.build("fifo"))
                spec = self.spec or "fifo"
            else:
                log.info("policy in force: %s%s", spec, " (with tenant queues)" if tenanted else "")
            self.spec = spec
        assert self.policy is not None
        reading = _Reading(changes, spec, now, tenanted, time.perf_counter(), self.policy)
        prepared = scheduling.prepare(session, self.policy, now, self.kept)
        if isinstance(prepared, scheduling.PassResult):
            return self._finish(session, reading, prepared)
        reading.prepared = prepared
        if decide_here is None:
            decide_here = self.db.waiting()[1] == 0
        if decide_here:
            return self._write(session, reading, scheduling.decide(prepared, self.policy))
        return reading

    def _write(self, session: Session, reading: _Reading, decisions: list[Decision]) -> Round:
        """The rest of a round: the policy's decisions written, checked again."""
        assert reading.prepared is not None
        result = scheduling.apply(session, reading.prepared, decisions, reading.now)
        return self._finish(session, reading, result)

    def _finish(self, session: Session, reading: _Reading, result: scheduling.PassResult) -> Round:
        now = reading.now
        if reading.tenanted:
            queues.observe(session, now, self.settings.queue_half_life_seconds)
        if now - self._pruned_at >= PRUNE_SECONDS:
            self._pruned_at = now
            checkpoints.prune(session, checkpoints.store_dir(self.settings))
            logs.expire(
                session,
                full_logs.store_dir(self.settings),
                now,
                self.settings.log_retention_days,
            )
            goodput.prune(session)
        self.metrics.passes.observe(time.perf_counter() - reading.started)
        return Round(reading.changes, result, reading.spec)

    def _round(self, session: Session) -> Round:
        """A whole round in one session, the policy deciding on this thread."""
        round_ = self._read(session, decide_here=True)
        assert isinstance(round_, Round)
        return round_

    def run_once_blocking(self) -> Round:
        return self.db.call(self._round)

    async def _run_round(self) -> Round:
        """A round on the database threads, ahead of every queued request (on
        SQLite's one thread a pass behind them waited seconds while GPUs stood
        free, issue 36), with the policy's decision off them: requests are
        served while it decides, and the write checks every row again
        (`scheduling.apply`). With no request waiting, it decides in place."""
        reading = await self.db.run(self._read, None, first=True)
        if isinstance(reading, Round):
            return reading
        assert reading.prepared is not None
        reading.prepared.queued = self.kept.pending.queued_at
        decisions = await asyncio.to_thread(scheduling.decide, reading.prepared, reading.policy)
        return await self.db.run(self._write, reading, decisions, first=True)

    async def run_once(self) -> Round:
        # Shielded: cancelling the loop cannot stop a round already on a
        # database thread, so `stop` waits for this future instead.
        self._round_running = asyncio.ensure_future(self._run_round())
        round_ = await asyncio.shield(self._round_running)
        self.passes += 1
        if round_.changes.nodes:
            self.shape.invalidate()  # a node went down
        self.wakeups.notify(round_.changes)
        if round_.result is not None:
            self.wakeups.wake_nodes(round_.result.nodes)
            self.metrics.started.inc(len(round_.result.started))
            self.metrics.preempted.inc(len(round_.result.preempted))
            if round_.result.resized or round_.result.resumed:
                log.info(
                    "resizing/moving jobs %s; resumed %s",
                    round_.result.resized,
                    round_.result.resumed,
                )
            for why in round_.result.skipped:
                log.warning("pass skipped a decision: %s", why)
        return round_

    def _timeout(self) -> float:
        tick = self.settings.tick_seconds
        if self.policy is not None and self.policy.tick_seconds:
            tick = min(tick, self.policy.tick_seconds)
        return tick

    def alive(self, within: float) -> bool:
        """The loop is running and has turned in the last `within` seconds (for /readyz)."""
        running = self._task is not None and not self._task.done()
        return running and time.monotonic() - self._turned_at <= within

    async def loop(self) -> None:
        idle = 0.0  # how long the loop waited for the wake-up of this pass
        while True:
            self._turned_at = time.monotonic()
            started = time.perf_counter()
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Unavailable as exc:
                if not self._outage:
                    log.warning("scheduling paused: %s", exc.message)
                self._outage = True
            except Exception:
                log.exception("scheduling round failed; retrying on the next wake-up")
            took = time.perf_counter() - started
            if took > 0.002 and idle < took:
                # Under a stream of wake-ups, passes would run back to back and
                # starve the requests that share the database thread: a round
                # goes ahead of every queued request, so only this rest leaves
                # them their turn. Resting as long as the pass took caps the
                # loop at half of it; the wake-ups that land meanwhile are
                # served by the next pass. (With a rest capped at 50 ms, 300
                # agents could not all register behind passes of a second.)
                # Only then: after a pass that followed a pause at least as
                # long as itself, the next wake-up (a lone submission on an
                # idle cluster) is served at once, not after a rest.
                await asyncio.sleep(min(took, MAX_REST_SECONDS))
            waited = time.perf_counter()
            await wait_for(self.wakeups.scheduler, self._timeout())
            idle = time.perf_counter() - waited

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.loop(), name="scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._round_running is not None:
            # A round still on its thread could otherwise take the lock
            # again after it was let go, or race `_let_go` on its connection.
            with contextlib.suppress(Exception):  # the loop would have logged it
                await self._round_running
        self._let_go()
