"""The agent's one retry loop: try a call again, with backoff, while it fails for a while.

Every call the agent makes to the server goes through `Retry(what).run(call)`
(`what` is a verb phrase for the log, e.g. "send logs of job 7"). A failure
that may pass (a `Temporary` error: the server unreachable or answering
5xx) is tried again after an exponential, jittered pause, warned about once
per outage and logged when it ends; anything else propagates at once, since
trying again cannot help. A retry ends after `tries` attempts (`GaveUp`,
with the last error) or when its `stop` event is set (`Stopped`); with
neither it goes on until the call succeeds, so a job's exit report is
never lost. A loop whose work changes between tries (the event outbox
re-forms its batch) drives one `Retry` by hand: `pause` after a failure,
`succeeded` after a success.

It owns no state beyond one `Retry`'s backoff position.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]


class Temporary(Exception):
    """A failure that may pass if the same call is tried again later."""


class GaveUp(Exception):
    """A call still failed after its last try; `last` is the last error."""

    def __init__(self, what: str, tries: int, last: BaseException) -> None:
        super().__init__(f"{what}: still failing after {tries} tries ({last})")
        self.tries = tries
        self.last = last


class Stopped(Exception):
    """The retry was stopped (its `stop` event set) before the call succeeded."""


def is_temporary(exc: BaseException) -> bool:
    return isinstance(exc, Temporary)


class Backoff:
    """Exponential backoff with jitter: `first` seconds, doubling up to `cap` seconds,
    each pause drawn within a quarter either side."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"backoff needs 0 < first <= cap; got first={first}, cap={cap}")
        self.first = first
        self.cap = cap
        self._next = first

    def reset(self) -> None:
        self._next = self.first

    def next_delay(self) -> float:
        delay = self._next * random.uniform(0.75, 1.25)
        self._next = min(self.cap, self._next * 2)
        return delay


class Retry:
    """Backoff, the warn-once log and the limits for one kind of call (`what`)."""

    def __init__(
        self,
        what: str,
        *,
        first: float = 0.1,
        cap: float = 5.0,
        tries: int | None = None,
        retryable: Callable[[BaseException], bool] = is_temporary,
        stop: asyncio.Event | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if tries is not None and tries < 1:
            raise ValueError(f"tries must be at least 1 (or None: no limit); got {tries}")
        self.what = what
        self.tries = tries
        self.retryable = retryable
        self.stop = stop
        self.backoff = Backoff(first, cap)
        self._sleep = sleep
        self._warned = False

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """`await call()` until it returns; see the module docstring for when it stops."""
        attempt = 0
        while True:
            attempt += 1
            try:
                result = await call()
            except Exception as exc:
                if not self.retryable(exc):
                    raise
                if self.tries is not None and attempt >= self.tries:
                    raise GaveUp(self.what, attempt, exc) from exc
                await self.pause(exc)
                continue
            self.succeeded()
            return result

    async def pause(self, why: BaseException | str) -> None:
        """One failed try: warn (once per outage), then wait the next backoff delay.
        Raises `Stopped` if the stop event is set before or during the wait."""
        if not self._warned:
            log.warning("cannot %s yet (%s); retrying", self.what, why)
            self._warned = True
        if self.stop is not None and self.stop.is_set():
            raise Stopped(self.what)
        delay = self.backoff.next_delay()
        if self.stop is None:
            await self._sleep(delay)
            return
        try:
            await asyncio.wait_for(self.stop.wait(), timeout=delay)
        except TimeoutError:
            return
        raise Stopped(self.what)

    def succeeded(self) -> None:
        """A try went through: the next failure starts a new outage."""
        if self._warned:
            log.info("%s: went through after retrying", self.what)
            self._warned = False
        self.backoff.reset()
