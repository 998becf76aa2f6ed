"""The suite's processes heed Ctrl-C even when the run began with SIGINT ignored.

A shell starts a background job (`.ci/run ... &`) with SIGINT ignored,
and a program inherits that: Python then raises no KeyboardInterrupt, and
the tests' Ctrl-C to a documented benchmark did nothing for 60 s.
`tests/conftest.py` undoes it at the start of every pytest process
(`_ctrl_c_heard`); this starts a Python the way such a job would and
asks what a program it starts inherits, with and without that step.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

# Run with SIGINT ignored from the start; prints what a child it starts gets.
PROBE = """
import subprocess, sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "undo":
    from conftest import _ctrl_c_heard
    _ctrl_c_heard()
child = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stdout.strip())
"""


def _as_a_background_job(step: str) -> str:
    # `trap '' INT` ignores SIGINT, and exec keeps it ignored, as `&` does.
    ignoring = ["sh", "-c", "trap '' INT; exec \"$@\"", "sh"]
    done = subprocess.run(
        [*ignoring, sys.executable, "-c", PROBE, str(TESTS), step],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


@pytest.mark.parametrize(("step", "heard"), [("undo", "True"), ("keep", "False")])
def test_a_child_of_a_run_started_with_sigint_ignored_gets_keyboard_interrupt(
    step: str, heard: str
) -> None:
    assert _as_a_background_job(step) == heard
