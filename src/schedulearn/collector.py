"""The garbage collector held off while a burst of short-lived objects is made.

Used where a burst is known: a scheduling pass (`server.services.scheduling`),
a simulation's replay (`sim.engine`) and a process's start
(`startup.loading`, which also freezes what it loaded).

A pass over a backlog of thousands of jobs builds tens of thousands of
small objects (views, keys, candidate lists). The collector's
threshold-triggered runs then land inside the pass in bursts: on 1,000
nodes x 8 GPUs with 10,000 waiting, single passes took 53-87 ms where
their CPU was 17-40 ms, and with the collector off every pass was within
50 ms (docs/results.md section 9). Holding it off for the pass moves the
same collections to just after it, between passes, where nothing waits.

A replay allocates millions of small acyclic objects: the collector's full
passes over them cost a seventh of the run and free nothing.

The collector is process-wide state, so this is too; the hold restores
what it found (a host that turned the collector off keeps it off), and
overlapping holds from two threads end with it back on.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_held() -> Iterator[None]:
    """Run the body with the garbage collector off, then as it was."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
