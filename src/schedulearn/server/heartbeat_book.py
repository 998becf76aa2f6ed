"""Heartbeats heard in memory, answered at once, written in group commits.

Owns which nodes this replica answers from memory (`known`), when it last
heard each (`heard`), and the heartbeats not yet written (`pending`).

Why: every node heartbeats every `heartbeat_seconds`, and a heartbeat
used to wait for its own transaction on the database threads, behind the
passes, event batches and listings. A server short of CPU then answered
heartbeats seconds late, past the node timeout: it marked live nodes down
and lost their runs, which made more work for it, until it collapsed
(bench/scale.py, 100 hosts with a full queue; docs/results.md 10).

So a heartbeat from a node this replica knows to be up is answered at
once (its lease renewed) and kept here; every `every` seconds the
heartbeats heard meanwhile are written in one transaction, each at the
time it arrived (`heartbeats.record_many`: the node's `last_seen`, its
parts' `last_reported`, the runs it no longer lists). The reaper trusts
this memory: a node heard within the timeout is not marked down, however
late its heartbeat is written (`claim_silent`).

Liveness is soft state: a crash loses at most the heartbeats of the last
`every` seconds, and a restarted server does not count its own downtime
against a node. Nothing else is kept here; job events and submissions are
committed before their replies, as before.

A node is answered from memory only after a heartbeat written the slow
way (in its own transaction, before the reply) found it known and up. It
leaves `known` when the reaper marks it down (under the same lock as the
reaper's choice, so no heartbeat can renew its lease in between), when
`node rm` removes it, and when a group commit finds it unknown; its next
heartbeat is then written the slow way, and told to register again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable

from schedulearn.protocol import Heartbeat
from schedulearn.server.db import Database
from schedulearn.server.services import heartbeats
from schedulearn.server.services.heartbeats import Beat

log = logging.getLogger(__name__)

Written = Callable[[list[tuple[Heartbeat, Beat]]], None]


class HeartbeatBook:
    """`hear(beat, now)` in the event loop; `claim_silent` from any thread."""

    def __init__(
        self, db: Database, grace: Callable[[], float], written: Written, every: float
    ) -> None:
        """`grace`: the report grace in force; `written`: called in the loop with
        each group commit's results; `every`: seconds between group commits."""
        self.db = db
        self.grace = grace
        self.written = written
        self.every = every
        self.commits = 0  # group commits done, for tests and benchmarks
        self._lock = threading.Lock()
        self._known: set[str] = set()
        self._heard: dict[str, float] = {}
        self._pending: dict[str, tuple[Heartbeat, float]] = {}
        self._task: asyncio.Task[None] | None = None

    def hear(self, beat: Heartbeat, now: float) -> bool:
        """Keep `beat`, heard at `now`, for the next group commit; False (nothing
        kept) when its node is not known here to be up: write it the slow way."""
        with self._lock:
            if beat.name not in self._known:
                return False
            self._heard[beat.name] = max(now, self._heard.get(beat.name, now))
            self._pending[beat.name] = (beat, now)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._commits(), name="heartbeats")
        return True

    def learned(self, node: str, now: float, known: bool) -> None:
        """A heartbeat written the slow way at `now` found `node` known and up, or not."""
        with self._lock:
            if known:
                self._known.add(node)
                self._heard[node] = max(now, self._heard.get(node, now))
            else:
                self._drop(node)

    def forget(self, nodes: Iterable[str]) -> None:
        """`nodes` were removed or marked down: their next heartbeats go the slow way."""
        with self._lock:
            for node in nodes:
                self._drop(node)

    def claim_silent(self, nodes: Iterable[str], cutoff: float) -> set[str]:
        """Of `nodes` (silent since `cutoff` by the database), those not heard here
        since either; they leave `known` before the caller marks them down."""
        with self._lock:
            silent = {n for n in nodes if self._heard.get(n, cutoff - 1.0) < cutoff}
            for node in silent:
                self._drop(node)
        return silent

    def _drop(self, node: str) -> None:
        self._known.discard(node)
        self._heard.pop(node, None)
        self._pending.pop(node, None)

    async def _commits(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            with self._lock:
                beats, self._pending = self._pending, {}
            if not beats:
                return
            # In node order: every group commit locks the nodes' rows in one order.
            batch = [beats[name] for name in sorted(beats)]
            try:
                done = await self.db.run(heartbeats.record_many, batch, self.grace())
            except Exception as exc:
                # Soft state: the reaper still trusts what was heard here, and
                # the nodes' next heartbeats are written in the next commit.
                log.warning("could not write %d heartbeats: %r", len(batch), exc)
                continue
            self.commits += 1
            with self._lock:
                for (beat, _), result in zip(batch, done, strict=True):
                    if not result.known:
                        self._drop(beat.name)
            self.written([(beat, result) for (beat, _), result in zip(batch, done, strict=True)])

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
