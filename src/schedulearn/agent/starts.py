"""How fast an agent starts runs: a gate every start passes through.

A node handed many runs at once (a 1,000-job `gpus: 0` array) must not
fork them all in one burst: each start costs the agent's event loop a
fork and some file work, and a loop busy for seconds sends no heartbeat
and reads no output. `StartGate` lets at most `concurrency` starts be in
progress and at most `per_second` begin each second; the rest wait
their turn (in arrival order: asyncio's semaphore and sleep are FIFO).

The default rate, 500 a second, leaves the loop most of its time: a
start of a process costs it about 1 ms of CPU, so even at the full rate
half of every second is left for output, reports and stop orders (and
heartbeats have a thread of their own). 20 a second, the first default,
capped a two-node cluster at 40 finished jobs a second
(`bench/api_load.py`), far below what the server and agents can do.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

DEFAULT_CONCURRENCY = 4
DEFAULT_PER_SECOND = 500.0


class StartGate:
    """`async with gate.slot():` around one start."""

    def __init__(
        self, concurrency: int = DEFAULT_CONCURRENCY, per_second: float = DEFAULT_PER_SECOND
    ) -> None:
        if concurrency < 1 or per_second <= 0:
            raise ValueError("a start gate needs concurrency >= 1 and per_second > 0")
        self.concurrency = concurrency
        self.per_second = per_second
        self._semaphore: asyncio.Semaphore | None = None
        self._next = 0.0
        self.started = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._semaphore is None:  # made in the running loop
            self._semaphore = asyncio.Semaphore(self.concurrency)
        async with self._semaphore:
            now = time.monotonic()
            at = max(now, self._next)
            self._next = at + 1.0 / self.per_second
            if at > now:
                await asyncio.sleep(at - now)
            self.started += 1
            yield
