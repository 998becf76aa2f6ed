"""Blocking calls made in one turn of the agent's loop, run in one trip to a thread.

Owns the calls waiting for that trip. A run's cgroup is made, joined and
removed by blocking calls (on cgroup v1 five directories a run, the kernel
doing milliseconds of work for each), which the agent makes in a worker
thread so that its loop keeps reading output and answering stop orders.
With one thread trip a call, the runs of one work reply finished their
starts, and later their exits, each at its own moment, so their reports
went to the server one or two at a time: 2.4x as many event batches as
without cgroups, each a transaction, and as many more work handouts and
scheduling passes (docs/results.md 6.17).

`ThreadCalls.call` queues the call; the calls queued before the loop
next runs its ready callbacks go to the thread together, run one after
another in the order made (the work is the kernel's CPU, which two
threads on a busy host would not finish sooner), and their callers all
resume in one turn of the loop, so their reports leave in one batch.
Nothing is held back to wait for more: the first call of a turn sets off
the trip at the end of that turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Call = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]"]


class ThreadCalls:
    """`await calls.call(fn, *args)` -> `fn(*args)`, run in a thread with the
    other calls made in the same turn of the loop. Event-loop thread only."""

    def __init__(self) -> None:
        self.trips = 0  # thread trips made, for tests and benchmarks
        self._queued: list[_Call] = []

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._trip, loop)
        self._queued.append((fn, args, future))
        return await future

    def _trip(self, loop: asyncio.AbstractEventLoop) -> None:
        calls, self._queued = self._queued, []
        self.trips += 1
        done = loop.run_in_executor(None, _run_all, [(fn, args) for fn, args, _ in calls])
        done.add_done_callback(lambda d: _settle(calls, d))


def _run_all(calls: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
    """Each call's (True, result) or (False, exception): one failing call is its
    caller's error alone."""
    results: list[tuple[bool, Any]] = []
    for fn, args in calls:
        try:
            results.append((True, fn(*args)))
        except Exception as exc:
            results.append((False, exc))
    return results


def _settle(calls: list[_Call], done: asyncio.Future[list[tuple[bool, Any]]]) -> None:
    if done.cancelled() or done.exception() is not None:
        failure = done.exception() if not done.cancelled() else asyncio.CancelledError()
        for _, _, future in calls:
            if not future.done():
                future.set_exception(failure or RuntimeError("thread trip failed"))
        return
    for (_, _, future), (ok, value) in zip(calls, done.result(), strict=True):
        if future.done():  # its caller was cancelled meanwhile
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
