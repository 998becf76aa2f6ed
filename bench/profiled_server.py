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
import sys
import threading
import time
from types import FrameType

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


if __name__ == "__main__":
    out = sys.argv[1]
    sys.argv = ["schedulearn", *sys.argv[2:]]
    sampler = Sampler()
    threading.Thread(target=sampler.run, args=(out,), daemon=True, name="sampler").start()
    atexit.register(sampler.dump, out)
    from schedulearn.cli.main import app

    app()
