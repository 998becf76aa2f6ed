"""The one way a test waits: poll until a condition holds, or fail saying what
was awaited and the last value seen.

Tests never sleep a fixed time and hope: they wait for the event that marks
the point they need (a state reached, a line logged, a scheduling pass
completed). `wait_until` is the sync form, `wait_until_async` the form for
tests running on an event loop. Both return the value that satisfied the
condition, so the caller asserts on what was actually seen.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

EVERY = 0.05  # seconds between polls: quick enough for tests, idle enough for 2 cores


class Timeout(AssertionError):
    """The awaited condition did not hold in time (an AssertionError, so tests fail, not error)."""


def _message(what: str, timeout: float, last: object, error: BaseException | None) -> str:
    said = [f"timed out after {timeout:g}s waiting for {what or 'the condition'}"]
    said.append("no value was read" if last is _NOTHING else f"last seen: {last!r}")
    if error is not None:
        said.append(f"last error: {error!r}")
    return "; ".join(said)


_NOTHING: Any = object()


@overload
def wait_until(
    read: Callable[[], T | None],
    timeout: float = 10.0,
    what: str = "",
    *,
    ignore: tuple[type[BaseException], ...] = (),
    every: float = EVERY,
) -> T: ...
@overload
def wait_until(
    read: Callable[[], T],
    timeout: float = 10.0,
    what: str = "",
    *,
    until: Callable[[T], object],
    ignore: tuple[type[BaseException], ...] = (),
    every: float = EVERY,
) -> T: ...
def wait_until(
    read: Callable[[], Any],
    timeout: float = 10.0,
    what: str = "",
    *,
    until: Callable[[Any], object] = bool,
    ignore: tuple[type[BaseException], ...] = (),
    every: float = EVERY,
) -> Any:
    """Call `read()` until `until(value)` holds (by default: the value is truthy,
    so never None: the first overload says so to the type checker).

    Returns that value. Exceptions of the types in `ignore` (a server not
    answering yet) count as "not yet"; any other propagates. On timeout
    raises `Timeout` naming `what` and the last value (or error) seen.
    """
    deadline = time.monotonic() + timeout
    last: Any = _NOTHING
    error: BaseException | None = None
    while True:
        try:
            value = read()
        except ignore as exc:
            error = exc
        else:
            last, error = value, None
            if until(value):
                return value
        if time.monotonic() >= deadline:
            raise Timeout(_message(what, timeout, last, error))
        time.sleep(every)


async def wait_until_async(
    read: Callable[[], T] | Callable[[], Awaitable[T]],
    timeout: float = 10.0,
    what: str = "",
    *,
    until: Callable[[T], object] = bool,
    every: float = EVERY,
) -> T:
    """`wait_until` for code on an event loop: `read` may be sync or async."""
    deadline = time.monotonic() + timeout
    last: Any = _NOTHING
    while True:
        got = read()
        value: T = await got if asyncio.iscoroutine(got) else got  # type: ignore[assignment]  # `read` may be sync or async; mypy cannot narrow the union through iscoroutine
        last = value
        if until(value):
            return value
        if time.monotonic() >= deadline:
            raise Timeout(_message(what, timeout, last, None))
        await asyncio.sleep(every)


def wait_until_serving(
    url: str, timeout: float, still_starting: Callable[[], object] = lambda: None
) -> None:
    """Wait until the server at `url` answers `/readyz`, calling
    `still_starting()` (which may assert that the process starting it is
    alive) before each look.

    Look this way before a CLI call: the CLI tries an unreachable server
    again for 20 s before it fails, so one call made before the server
    listened kept a test waiting those 20 s after the server was up.
    """

    def ready() -> bool:
        still_starting()
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as reply:
            return bool(reply.status == 200)

    wait_until(ready, timeout, f"{url} to serve", ignore=(OSError,), every=0.2)
