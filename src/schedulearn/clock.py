"""The clock protocol: time is passed in, never read from a global.

It lives outside `core` because `SystemClock` reads the real time, and
core reads no clock.

The live server uses `SystemClock`; tests pass a fake; the simulator
has its own virtual time and hands it to policies in `ClusterView.now`.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class SystemClock:
    """Wall-clock seconds since the epoch."""

    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to; for tests."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds
