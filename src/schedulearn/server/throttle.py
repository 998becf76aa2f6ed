"""Failed password sign-ins, counted so guessing is slow.

Owns the in-memory count of failed sign-ins of this server process, per
(client address, user name): after `limit` failures within `window`
seconds that pair is refused, without checking the password, until the
oldest failure leaves the window. Keyed by the pair, not by the name
alone, so someone guessing at a name from one address does not lock its
owner out everywhere. Each replica counts its own (a guesser spread over
replicas gets `limit` tries on each); the sign-in route also waits a
moment after every failure. The clock is passed in.
"""

from __future__ import annotations

import threading
from collections import deque

# A pair's failures are forgotten once this many pairs are counted and theirs
# have all left the window, so the table cannot grow without bound.
_SWEEP_AT = 10_000


class SignInThrottle:
    def __init__(self, limit: int = 5, window: float = 900.0) -> None:
        self.limit = limit
        self.window = window
        self._failures: dict[tuple[str, str], deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: tuple[str, str], now: float) -> deque[float]:
        times = self._failures.get(key, deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        return times

    def wait_seconds(self, address: str, user: str, now: float) -> float:
        """0 when the pair may try now, else how long until it may."""
        with self._lock:
            times = self._recent((address, user.lower()), now)
            if len(times) < self.limit:
                return 0.0
            return times[0] + self.window - now

    def failed(self, address: str, user: str, now: float) -> None:
        key = (address, user.lower())
        with self._lock:
            times = self._recent(key, now)
            times.append(now)
            self._failures[key] = times
            if len(self._failures) > _SWEEP_AT:
                for old in [k for k, v in self._failures.items() if not self._recent(k, now)]:
                    del self._failures[old]

    def succeeded(self, address: str, user: str) -> None:
        with self._lock:
            self._failures.pop((address, user.lower()), None)
