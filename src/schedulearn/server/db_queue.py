"""The database threads' queue: requests first-come, the scheduler's work first.

Owns the threads that `Database` runs queries on and the queue in front
of them. Work is taken in two classes: `first` work (the scheduler's
round) before any queued request, and requests in the order they came.
With SQLite there is one database thread, and a pass queued first-come
behind a full queue of requests waited seconds for its turn while GPUs
stood free (issue 36: 13 passes in a 30-40 s window at 300 hosts, each
behind every listing, event batch and log batch queued before it).

What requests rely on is kept: they run in the order they came among
themselves (on SQLite one at a time, as before), a call that runs is
never cut short, and each caller still awaits its own call's end (a
submission is answered once its commit is done). Only the pass moves
up, and it sees whatever the requests before it have committed, as if
it had been woken a moment earlier. A pass queued while another runs
waits its turn among the `first` work, in order.

A queued call whose future is cancelled (`Database.run` gives up on a
stalled PostgreSQL) never runs, as with `ThreadPoolExecutor`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

__all__ = ["DbQueue"]

T = TypeVar("T")

_Item = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...]]


class DbQueue(Executor):
    """`workers` threads taking `first` work before requests, each class in order."""

    def __init__(self, workers: int, name: str = "db") -> None:
        if workers < 1:
            raise ValueError(f"a database queue needs at least one thread; got {workers}")
        self._ready = threading.Condition()
        self._first: deque[_Item] = deque()
        self._requests: deque[_Item] = deque()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Queue `fn(*args)` behind every queued request (first-come)."""
        if kwargs:
            raise TypeError("DbQueue.submit takes positional arguments only")
        return self._put(self._requests, fn, args)

    def submit_first(self, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        """Queue `fn(*args)` ahead of every queued request (behind earlier `first` work)."""
        return self._put(self._first, fn, args)

    def _put(self, queue: deque[_Item], fn: Callable[..., T], args: tuple[Any, ...]) -> Future[T]:
        future: Future[T] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the database queue is closed; no new work is taken")
            queue.append((future, fn, args))
            self._ready.notify()
        return future

    @property
    def threads(self) -> int:
        return len(self._threads)

    def waiting(self) -> tuple[int, int]:
        """How many calls are queued: (first, requests)."""
        with self._ready:
            return len(self._first), len(self._requests)

    def _take(self) -> _Item | None:
        with self._ready:
            while not (self._first or self._requests or self._closed):
                self._ready.wait()
            if self._first:
                return self._first.popleft()
            if self._requests:
                return self._requests.popleft()
            return None  # closed and drained

    def _work(self) -> None:
        while (item := self._take()) is not None:
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while queued: never run
            try:
                result = fn(*args)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            del item, future, fn, args  # drop references before waiting again

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no new work; run what is queued (unless `cancel_futures`), then end."""
        with self._ready:
            self._closed = True
            if cancel_futures:
                for future, _fn, _args in (*self._first, *self._requests):
                    future.cancel()
                self._first.clear()
                self._requests.clear()
            self._ready.notify_all()
        if wait:
            for thread in self._threads:
                thread.join()
