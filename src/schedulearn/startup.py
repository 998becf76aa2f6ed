"""A process's start: what it loads for its whole life, loaded without the
garbage collector.

Importing the server (FastAPI, SQLAlchemy, pydantic, every model and route)
makes hundreds of thousands of objects that live as long as the process,
and hardly any garbage; the collector, run every 700 new objects, walked
them over and over: 0.4 s of the 2.7 s of CPU it took to import the server
on a machine of this project's kind (measured with the collector disabled).
`loading()` holds automatic collection off while a block loads, then moves
everything that exists to the permanent generation (`gc.freeze`), so no
later collection walks those objects either, and lets collection run again.

Only for loading: a block that works (a simulation, a request) must make
its garbage collectable as it goes.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from schedulearn.collector import collector_held


@contextmanager
def loading() -> Iterator[None]:
    """Collection held off for the block; what it made is frozen, not collected, after."""
    with collector_held():
        try:
            yield
        finally:
            gc.freeze()
