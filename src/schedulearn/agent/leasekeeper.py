"""The agent's side of its lease: renew it, record it for the guard, notice a lapse.

`LeaseKeeper` is told of every lease a reply grants (`renew`, from the
heartbeat thread; `reset`, from a registration). Each renewal is written
to the state directory for the guard process (`agent.leaseguard`), which
is started when none runs. Once the lease has lapsed the guard stops the
node's jobs, so the agent must not carry on as if they ran: the keeper
calls `on_lapse` once, heartbeats' renewals are ignored from then on, and
only a new registration (which tells the server which runs are gone, as
lost to a node failure) gives the agent a lease again.

A lapse is decided on the boot clock the guard reads too: a renewal
written after the old lease's end counts as a lapse even though it
renews, since the guard may have acted in between.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from schedulearn.agent import lease as leases
from schedulearn.agent import leaseguard
from schedulearn.agent.lease import Lease

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Thread-safe: renewed from the heartbeat thread, read from the main loop."""

    def __init__(
        self,
        state_dir: Path,
        on_lapse: Callable[[], object],
        clock: Callable[[], float] = leases.now,
        start_guard: bool = True,
    ) -> None:
        self.state_dir = state_dir
        self._on_lapse = on_lapse
        self._clock = clock
        self._start_guard = start_guard
        self._lock = threading.Lock()
        self._lease: Lease | None = None
        self._lapsed = False
        self._guard: subprocess.Popen[bytes] | None = None

    @property
    def lease(self) -> Lease | None:
        return self._lease

    @property
    def lapsed(self) -> bool:
        """True from a lapse until the next registration's lease (`reset`)."""
        return self._lapsed

    def reset(self, lease: Lease | None) -> None:
        """A registration's lease (None: the server grants none): a fresh start."""
        with self._lock:
            self._lapsed = False
            self._lease = None
            if lease is not None:
                self._write(lease)

    def renew(self, lease: Lease | None) -> None:
        """A heartbeat reply's lease; ignored after a lapse (register first)."""
        if lease is None:
            return
        with self._lock:
            if self._lapsed:
                return
            self._write(lease)

    def check(self) -> bool:
        """Whether the lease has lapsed; the first time it has, `on_lapse` is called."""
        with self._lock:
            if self._lapsed or self._lease is None:
                return self._lapsed
            if not self._lease.lapsed(self._clock()):
                return False
            self._lapsed = True
        log.warning(
            "this node's lease lapsed (no heartbeat reply renewed it): its jobs are stopped, "
            "and the server runs them elsewhere"
        )
        self._on_lapse()
        return True

    def close(self, jobs_left: bool) -> None:
        """The agent exits: with no job left, nothing is to be enforced."""
        if not jobs_left:
            leases.clear(self.state_dir)
        if self._guard is not None and not jobs_left:
            # It reads the lease file's absence within a second and exits.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._guard.wait(timeout=5)

    # Under the lock.
    def _write(self, lease: Lease) -> None:
        old = self._lease
        lease = lease.later(old)
        try:
            leases.write(self.state_dir, lease)
        except OSError as exc:
            # The guard still holds the old lease; so does the agent, to lapse with it.
            log.warning("could not record the renewed lease in %s: %s", self.state_dir, exc)
            return
        self._lease = lease
        # Written after the old lease's end: the guard may have acted on it already.
        if old is not None and old.lapsed(self._clock()):
            self._lease = old
        self._ensure_guard()

    def _ensure_guard(self) -> None:
        if not self._start_guard:
            return
        if self._guard is not None and self._guard.poll() is None:
            return
        if leaseguard.guard_running(self.state_dir):
            return  # an earlier agent's guard, still enforcing the same file
        try:
            self._guard = leaseguard.spawn(self.state_dir)
        except OSError as exc:
            log.warning(
                "could not start the lease guard: %s; jobs are stopped on a lapse only while "
                "this agent runs",
                exc,
            )
