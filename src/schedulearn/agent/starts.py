"""How fast an agent starts runs: a gate every start passes through.

A node handed many runs at once (a 1,000-job `gpus: 0` array) must not
fork them all in one burst: each start costs the agent's event loop a
fork and some file work, and a loop busy for seconds sends no heartbeat
and reads no output. `StartGate` lets at most `concurrency` starts be in
progress and at most `per_second` begin each second, after a first
`burst` that may begin at once; the rest wait their turn (in arrival
order: asyncio's semaphore and sleep are FIFO). It is a token bucket
(the generic cell rate algorithm: `burst` tokens, `per_second` refill).

Why the burst: a work poll hands an agent the few starts one scheduling
pass gave it, and pacing even those (2 ms apart at 500 a second) spread
them, and so their "started" and exit reports, over many small event
batches and scheduling passes. With a burst of 32, 2,000 trivial jobs on
two agents finished at 303-376 a second against 263-298, at 15-27% less
CPU a job (docs/results.md 6.8); a 1,000-run array still starts at
`per_second` after its first 32.

Why the concurrency is the burst: a start that waits (a cgroup made and
joined in a thread, a container engine's reply) holds its place while the
loop is free, and with 4 places the 32 starts of one reply finished a few
at a time, so their "started" reports, and later their exits, went to
the server in 2-3x as many event batches (each a transaction, and as many
more work handouts and scheduling passes). With 32, one reply's starts
make their cgroups in one thread trip (`agent.threadcalls`) and report
together: on `bench/api_load.py` 203-260 event batches an agent instead
of 495-623, and less server CPU a finished job (docs/results.md 6.18).

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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

DEFAULT_CONCURRENCY = 32
DEFAULT_PER_SECOND = 500.0
DEFAULT_BURST = 32


class StartGate:
    """`async with gate.slot():` around one start."""

    def __init__(
        self,
        concurrency: int = DEFAULT_CONCURRENCY,
        per_second: float = DEFAULT_PER_SECOND,
        burst: int = DEFAULT_BURST,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """`clock` and `sleep`: the time and the wait (tests pass their own)."""
        if concurrency < 1 or per_second <= 0 or burst < 1:
            raise ValueError("a start gate needs concurrency >= 1, per_second > 0 and burst >= 1")
        self.concurrency = concurrency
        self.per_second = per_second
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._semaphore: asyncio.Semaphore | None = None
        # When the bucket is full again (the algorithm's "theoretical arrival
        # time"): a start may begin `burst - 1` intervals before it.
        self._full_at = 0.0
        self.started = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._semaphore is None:  # made in the running loop
            self._semaphore = asyncio.Semaphore(self.concurrency)
        async with self._semaphore:
            now = self._clock()
            interval = 1.0 / self.per_second
            full_at = max(now, self._full_at)
            at = max(now, full_at - (self.burst - 1) * interval)
            self._full_at = full_at + interval
            if at > now:
                await self._sleep(at - now)
            self.started += 1
            yield
