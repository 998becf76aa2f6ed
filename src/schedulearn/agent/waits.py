"""Waiting for an `asyncio.Event` with a timeout, without a task of its own.

`asyncio.wait_for(event.wait(), timeout)` on Python 3.11 wraps the wait in
a new task (3.12 no longer does), and the agent waits like that several
times in the life of every job: for its exit between reads of its output,
for the end of its progress reports. Under `bench/api_load.py` those tasks
and their callbacks were a few percent of an agent's CPU. `asyncio.timeout`
cancels the waiting task itself when the time is up, which costs one timer.
"""

from __future__ import annotations

import asyncio
import contextlib


async def wait_set(event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` seconds have passed; whether it is set."""
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()
