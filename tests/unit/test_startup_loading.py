"""`startup.loading`: no automatic collection while a process loads, what it
loaded frozen after, and collection as it was before."""

from __future__ import annotations

import gc
import subprocess
import sys

from schedulearn.startup import loading


def test_collection_is_held_off_while_loading_and_the_loaded_objects_are_frozen() -> None:
    script = """
import gc
from schedulearn.startup import loading
assert gc.isenabled()
with loading():
    assert not gc.isenabled()
    kept = [[i] for i in range(10_000)]
assert gc.isenabled()
print(gc.get_freeze_count())
"""
    # In a process of its own: a freeze cannot be undone for the objects it moved.
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert int(done.stdout) >= 10_000


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with loading():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
