"""The preemption notice: `should_stop()` turns True once the scheduler asks the job to stop.

The agent stops a job with SIGTERM, waits a grace period, then kills it.
A script that polls `should_stop()` at step boundaries can save a
checkpoint and exit cleanly inside that grace period, and resume from
the checkpoint when it is scheduled again. The handler is installed on
import, in the main thread only (Python's rule for signal handlers);
any SIGTERM handler the script had before is still called after ours.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

_stop = threading.Event()
_previous: Any = None


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _stop.set()
    if callable(_previous) and _previous not in (signal.SIG_IGN, signal.SIG_DFL):
        _previous(signum, frame)


def install() -> bool:
    """Install the SIGTERM handler; False when not in the main thread."""
    global _previous
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if current is _on_sigterm:
        return True
    _previous = current
    signal.signal(signal.SIGTERM, _on_sigterm)
    return True


def should_stop() -> bool:
    """True once a stop was requested (SIGTERM): save and exit at the next step boundary."""
    return _stop.is_set()


def request_stop() -> None:
    """Ask the training loop to stop, as SIGTERM would (for a script's own reasons)."""
    _stop.set()


install()
