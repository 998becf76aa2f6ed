"""The node's lease: how long its jobs may run without word from the server.

Every heartbeat (and registration) the server answers renews the node's
lease for `lease_seconds`; the server runs a silent node's jobs elsewhere
only after its node timeout, which is longer than the lease plus the
grace a stopped job gets (`settings.ServerSettings.lease`). So a job is
stopped before a second copy of it may start, however the agent was cut
off: frozen (SIGSTOP), killed, or alive but unable to reach the server.

The lease is counted from when the agent *sent* the request the reply
renewed it with, on `CLOCK_BOOTTIME`: the server granted it later than
that, so the agent's end of the lease is never later than the server's;
no wall clock is compared between hosts; and unlike `CLOCK_MONOTONIC`
this clock keeps counting while the host is suspended. The clock is the
same for every process on the host, so the agent writes the lease's end
to a file in its state directory (`LEASE_FILE`) and the guard process
(`agent.leaseguard`), which outlives the agent, enforces it.

Standard library only: the guard imports this module and nothing heavier.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

LEASE_FILE = "lease"
# Written in a job directory by whoever stopped the run because the lease
# lapsed: the run's end is then a lost node, not the job's own exit.
LEASE_STOPPED_FILE = "lease_stopped"


def now() -> float:
    """Seconds on the host's boot clock (counts through suspend; same in every process)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease: it ends at `expires` (boot clock); a job it stops gets `grace`
    seconds between SIGTERM and SIGKILL."""

    expires: float
    grace: float

    @classmethod
    def granted(cls, sent_at: float, seconds: float, grace: float) -> Lease:
        """The lease a reply grants to a request sent at `sent_at` (boot clock)."""
        return cls(expires=sent_at + seconds, grace=max(0.0, grace))

    def left(self, at: float) -> float:
        """Seconds until it lapses (negative: lapsed that long ago)."""
        return self.expires - at

    def lapsed(self, at: float) -> bool:
        return at >= self.expires

    def later(self, other: Lease | None) -> Lease:
        """The lease to keep of this and `other`: replies may arrive out of order."""
        return self if other is None or self.expires >= other.expires else other


def lease_path(state_dir: Path) -> Path:
    return state_dir / LEASE_FILE


def write(state_dir: Path, lease: Lease) -> None:
    """Record `lease` for the guard: a new file renamed over the old, so a reader
    never sees half of one."""
    path = lease_path(state_dir)
    tmp = path.with_name(f".{LEASE_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps({"expires": lease.expires, "grace": lease.grace}))
    os.replace(tmp, path)


def read(state_dir: Path) -> Lease | None:
    """The recorded lease; None when there is none (or it cannot be read)."""
    try:
        data = json.loads(lease_path(state_dir).read_text())
        return Lease(expires=float(data["expires"]), grace=float(data["grace"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clear(state_dir: Path) -> None:
    """No lease to enforce (the agent left with no job running)."""
    lease_path(state_dir).unlink(missing_ok=True)


def stopped_by_lease(job_dir: str | Path) -> bool:
    """Whether the run in `job_dir` was stopped because its node's lease lapsed."""
    # os.path, not pathlib: asked at the end of every run, and pathlib's
    # objects cost more than the stat.
    return os.path.exists(os.path.join(job_dir, LEASE_STOPPED_FILE))


def mark_stopped(job_dir: str | Path, why: str) -> None:
    (Path(job_dir) / LEASE_STOPPED_FILE).write_text(why + "\n")
