"""`schedulearn server` with a sampling profiler: for bench/scale.py --profile.

Runs the command line given (`profiled_server.py OUT server --port ...`)
with a thread that every 5 ms reads every other thread's stack
(`sys._current_frames`): a poor man's py-spy (not installed here), cheap
enough not to move the figures much. As the server exits (SIGTERM ends it
cleanly), and every 10 s, it writes to OUT the functions most often on the stack of a
thread that was not waiting (in total, and as the innermost frame of the
project's own code), so what grows with N shows by name.
"""

from __future__ import annotations

import atexit
import collections
import os
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

# Innermost frames that mean the thread is idle, not working.
_IDLE = {"select", "wait", "_worker", "get", "poll", "acquire", "run_forever", "_run_once"}
_OWN = "/schedulearn/"


def _where(frame: FrameType) -> str:
    code = frame.f_code
    return f"{code.co_filename.rsplit('/site-packages/', 1)[-1]}:{code.co_name}"


class Sampler:
    def __init__(self, every: float = 0.005) -> None:
        self.every = every
        self.total = 0
        self.stack: collections.Counter[str] = collections.Counter()
        self.own: collections.Counter[str] = collections.Counter()
        self.me = 0  # the sampling thread's own id, set as it starts
        # The event loop's thread alone: what keeps it from answering requests.
        self.loop_total = 0
        self.loop_own: collections.Counter[str] = collections.Counter()
        self.loop_inner: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()

    def run(self, out: str) -> None:
        # Written every 10 s too: a server stopped the hard way runs no atexit.
        self.me = threading.get_ident()
        main = threading.main_thread().ident
        written = time.monotonic()
        while not self._stop.wait(self.every):
            if time.monotonic() - written > 10:
                self.dump(out)
                written = time.monotonic()
            for ident, frame in sys._current_frames().items():
                if ident == self.me or frame.f_code.co_name in _IDLE:
                    continue
                self.total += 1
                seen: set[str] = set()
                innermost_own = None
                f: FrameType | None = frame
                while f is not None:
                    where = _where(f)
                    if where not in seen:
                        seen.add(where)
                        self.stack[where] += 1
                    if innermost_own is None and _OWN in f.f_code.co_filename:
                        innermost_own = where
                    f = f.f_back
                if innermost_own is not None:
                    self.own[innermost_own] += 1
                if ident == main:
                    self.loop_total += 1
                    self.loop_own[innermost_own or _where(frame)] += 1
                    # Any code's: the loop's time goes mostly to uvicorn, asyncio
                    # and waits for the GIL held by the database threads.
                    self.loop_inner[_where(frame)] += 1

    def dump(self, out: str) -> None:
        lines = [f"{self.total} busy samples, one every {self.every * 1000:g} ms per thread"]
        # Exact, beside the samples: each thread's CPU (the event loop's
        # samples cannot tell uvloop's wait in epoll from work), and each
        # database call's CPU by function (`timed_calls`).
        lines.append("\n# CPU seconds by thread (/proc)")
        lines += [f"{cpu:8.2f}  {name}" for name, cpu in thread_cpu()]
        lines.append("\n# database calls: CPU seconds, calls, CPU ms a call, by function")
        for name, (cpu, calls) in sorted(CALLS.items(), key=lambda kv: -kv[1][0])[:40]:
            lines.append(f"{cpu:8.2f}  {calls:7d}  {1000 * cpu / calls:7.2f}  {name}")
        lines.append("\n# most often on the stack")
        lines += [f"{n / self.total:6.1%}  {w}" for w, n in self.stack.most_common(80)]
        lines.append("\n# the innermost frame of the project's own code")
        lines += [f"{n / self.total:6.1%}  {w}" for w, n in self.own.most_common(50)]
        lines.append(f"\n# the event loop's thread: {self.loop_total} busy samples; innermost own")
        total = max(self.loop_total, 1)
        lines += [f"{n / total:6.1%}  {w}" for w, n in self.loop_own.most_common(40)]
        lines.append("\n# the event loop's thread: innermost frame")
        lines += [f"{n / total:6.1%}  {w}" for w, n in self.loop_inner.most_common(40)]
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")


def thread_cpu() -> list[tuple[str, float]]:
    """(thread name, CPU seconds) of this process's threads, busiest first."""
    tick = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = collections.defaultdict(float)
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        name = names.get(int(task.name), f"tid {task.name}")
        # Worker threads of one pool together ("db_0", "db_1", ... -> "db").
        out[name.split("_")[0] if name.startswith("db") else name] += (
            int(fields[11]) + int(fields[12])
        ) / tick
    return sorted(out.items(), key=lambda kv: -kv[1])


# function name -> (CPU seconds on its thread, calls), from `Database.call`.
CALLS: dict[str, tuple[float, int]] = collections.defaultdict(lambda: (0.0, 0))


def timed_calls() -> None:
    """Count each database call's thread CPU under its function's name."""
    from schedulearn.server import db

    plain = db.Database.call

    def call(self: db.Database, fn: Any, *args: Any) -> Any:
        began = time.thread_time()
        try:
            return plain(self, fn, *args)
        finally:
            cpu, calls = CALLS[db._name(fn)]
            CALLS[db._name(fn)] = (cpu + time.thread_time() - began, calls + 1)

    db.Database.call = call  # type: ignore[method-assign]  # a profiling wrapper, this process only


if __name__ == "__main__":
    out = sys.argv[1]
    timed_calls()
    sys.argv = ["schedulearn", *sys.argv[2:]]
    sampler = Sampler()
    threading.Thread(target=sampler.run, args=(out,), daemon=True, name="sampler").start()
    atexit.register(sampler.dump, out)
    from schedulearn.cli.main import app

    app()
