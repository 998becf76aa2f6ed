"""Group commit: concurrent requests of one kind share one transaction.

Owns the queue of submissions waiting for the database thread. The first
request starts a flush at once (no added latency when idle); requests
that arrive while a flush is running wait for the next one and go in
together, so under load one commit serves many submissions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from schedulearn.server.db import Database

I = TypeVar("I")  # noqa: E741
R = TypeVar("R")


class Batcher(Generic[I, R]):
    """`await batcher.add(item)` -> that item's result from one `fn(session, items, ...)` call."""

    def __init__(
        self, db: Database, fn: Callable[..., list[R | Exception]], *args_factory: Callable[[], Any]
    ) -> None:
        self._db = db
        self._fn = fn
        self._args = args_factory
        self._queue: list[tuple[I, asyncio.Future[R]]] = []
        self._running = False

    async def add(self, item: I) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                items = [item for item, _ in batch]
                try:
                    results = await self._db.run(self._fn, items, *(f() for f in self._args))
                except Exception as exc:  # the whole transaction failed
                    results = [exc] * len(batch)
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, Exception):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self._running = False
