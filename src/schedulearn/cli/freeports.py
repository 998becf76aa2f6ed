"""Ports for the servers a local cluster (or a test) starts on 127.0.0.1.

`free_port()` answers a port nothing listens on, for a process about to
bind it. Asking the kernel (bind to port 0) is racy twice over: the port it
names is in Linux's ephemeral range, where any outgoing connection on the
host may take it before the server binds; and two callers at once (test
workers in parallel) may each be told the same one. Either way a server
fails to bind, or, worse, the caller reaches another process's server on
that port and goes on as if it were its own (seen in CI as a replica that
was ready, then refused connections).

So the ports come from a range below the ephemeral one (and below the
ports gangs of jobs get in tests, `SCHEDULEARN_GANG_BASE_PORT`), and a
port handed out is noted in a file shared by every process on the host
(one per user, under an exclusive lock), so no other caller gets it for `HELD_SECONDS`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
import time
from pathlib import Path

PORTS = range(10000, 20000)
HELD_SECONDS = 900.0  # longer than any test keeps a server it started
# One per user: a file another account made is not ours to lock or write.
LEDGER = Path(tempfile.gettempdir()) / f"schedulearn-ports-{os.getuid()}"


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on and no other caller was given lately."""
    LEDGER.touch(exist_ok=True)
    with LEDGER.open("r+") as ledger:
        fcntl.flock(ledger, fcntl.LOCK_EX)  # released when the file closes
        now = time.time()
        recent = {port: at for port, at in _read(ledger.read()) if now - at < HELD_SECONDS}
        for port in random.sample(PORTS, len(PORTS)):
            if port in recent or not _bindable(port):
                continue
            recent[port] = now
            ledger.seek(0)
            ledger.truncate()
            ledger.write("".join(f"{p} {at:.0f}\n" for p, at in recent.items()))
            return port
    raise RuntimeError(
        f"no free port in {PORTS.start}-{PORTS.stop - 1} on 127.0.0.1; "
        f"if servers of earlier runs are gone, remove {LEDGER}"
    )


def _read(text: str) -> list[tuple[int, float]]:
    """The ledger's (port, time handed out) lines; a torn or foreign line is skipped."""
    entries = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            port, at = line.split()
            entries.append((int(port), float(at)))
    return entries


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
