"""Progress of a long `simulate` as plain lines, for a stderr that is not a terminal.

A progress bar redraws one line in place, which a file or a CI log cannot
show: piped, Rich's bar printed nothing until the end, and a run killed
after minutes left no trace of how far it got. `ProgressLines` takes the
simulator's progress callback (`label, finished, total`) and writes a line
at its first report, at most every `every` seconds while it runs, and when
it ends, each one whole and flushed:

    simulate: philly / fifo: 500 of 100,000 jobs finished (0%) after 0 s
    simulate: philly / fifo: 12,345 of 100,000 jobs finished (12%) after 5 s
    simulate: philly / fifo: done, 100,000 jobs in 241 s

Runs in parallel processes (several workloads) report only as each ends
(`run_ended`). The clock is passed in, so a test drives it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO


class ProgressLines:
    """A `RunProgress` callback that writes a line per run start, per `every`
    seconds and per run end to `stream`."""

    def __init__(self, stream: TextIO, every: float, clock: Callable[[], float]) -> None:
        self._stream = stream
        self._every = every
        self._clock = clock
        self._label: str | None = None
        self._started = 0.0
        self._last = 0.0
        self._done = False

    def __call__(self, label: str, finished: int, total: int) -> None:
        now = self._clock()
        first = label != self._label
        if first:
            # The engine's first report comes once its first jobs have
            # finished; the run began at most a few seconds before.
            self._label, self._started, self._last, self._done = label, now, now, False
        if self._done:
            # The engine may report a run's end twice (its last step, then its end).
            return
        if finished >= total:
            self._done = True
            self._write(f"{label}: done, {total:,} jobs in {now - self._started:,.0f} s")
        elif first or now - self._last >= self._every:
            self._last = now
            share = 100 * finished / total if total else 100.0
            self._write(
                f"{label}: {finished:,} of {total:,} jobs finished ({share:.0f}%) "
                f"after {now - self._started:,.0f} s"
            )

    def _write(self, text: str) -> None:
        self._stream.write(f"simulate: {text}\n")
        self._stream.flush()


def run_ended(stream: TextIO, label: str, seconds: float, done: int, total: int) -> None:
    """The line for a run that ended among several in parallel processes (each
    process's own progress stays in it)."""
    stream.write(f"simulate: {label}: done in {seconds:,.0f} s ({done} of {total} runs)\n")
    stream.flush()
