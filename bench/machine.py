"""What machine a benchmark ran on, so figures from two machines can be compared.

Owns nothing but measurements of the machine itself:

- `describe()`: CPU count and model, Python version and build, load average;
- `single_core_speed()`: a fixed pure-Python workload (dicts, attribute
  access, small function calls, string formatting: what the server's and
  the agent's interpreters spend their time on), run several times; the
  figure is the best run's thousands of loops per CPU second, and beside
  it the share of a core the process got while it ran (below 1.0 when
  other processes were competing for the CPUs: then every wall-clock
  figure printed next to it is depressed too);
- `CpuMeter`: CPU seconds spent by given processes, or by the children
  they reaped (an agent's jobs), between two readings, from /proc, for a
  cost per job that competition for the CPUs barely changes.
"""

from __future__ import annotations

import os
import platform
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class _Item:
    __slots__ = ("name", "size", "tags")

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self.tags: dict[str, int] = {}


def _loop(i: int) -> int:
    """One loop of the fixed workload (the same on every machine and every run)."""
    items = [_Item(f"job-{i}-{k}", k) for k in range(8)]
    by_name = {it.name: it for it in items}
    total = 0
    for it in items:
        it.tags["gpus"] = it.size % 4
        total += by_name[it.name].tags["gpus"] + len(it.name)
    return total + sum(sorted(it.size for it in items))


def single_core_speed(runs: int = 7, loops: int = 4000) -> tuple[float, float]:
    """(k loops per CPU second, best run; share of a core the runs got)."""
    best = 0.0
    cpu_total = wall_total = 0.0
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.process_time()
        for i in range(loops):
            _loop(i)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        cpu_total += cpu
        wall_total += wall
        if cpu > 0:
            best = max(best, loops / cpu / 1000)
    return best, (cpu_total / wall_total if wall_total > 0 else 0.0)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _libpython_shared() -> bool | None:
    """Whether this interpreter runs from a shared libpython (position-independent
    code; in the one comparison measured, docs/results.md 6.12, the static
    build was the faster); None where unknown."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    return "libpython" in maps


def describe() -> str:
    """One line: CPUs, model, Python (its build: PGO/LTO as configured, and a
    shared or static libpython), load.

    The build moves the figures: on one 2-core host Debian's own
    /usr/bin/python3.11 (static) measured 180 k loops per CPU second where
    pyenv's 3.11.7 (shared libpython, no PGO/LTO) measured 131 k
    (docs/results.md, 6.12). A distribution may build its static
    interpreter with PGO/LTO without saying so in its configuration.
    """
    config = str(sysconfig.get_config_var("CONFIG_ARGS") or "")
    build = [flag for flag in ("--enable-optimizations", "--with-lto") if flag in config]
    shared = _libpython_shared()
    build.append({True: "shared libpython", False: "static", None: "?"}[shared])
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"{os.cpu_count()} CPUs ({_cpu_model()}), Python {platform.python_version()} "
        f"({', '.join(build)}), {platform.system()}, load average {load}"
    )


def speed_line() -> str:
    speed, share = single_core_speed()
    busy = "" if share > 0.9 else "; the machine was busy, wall-clock figures are depressed"
    return (
        f"single-core speed: {speed:.1f} k loops per CPU second (bench/machine.py), "
        f"{share:.2f} of a core while measuring{busy}"
    )


def _cpu_seconds(pid: int, reaped: bool = False) -> float:
    """utime + stime of `pid` itself, or (`reaped`) of the children it has reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # Fields 14-17 of stat(5): utime stime cutime cstime (after pid and comm).
    first = 13 if reaped else 11
    return (int(fields[first]) + int(fields[first + 1])) / _TICK


@dataclass
class CpuMeter:
    """CPU seconds of named processes since `start()`; a name in `reaped` counts
    the children its process has reaped instead (an agent's jobs)."""

    pids: dict[str, int]
    reaped: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._base: dict[str, float] = {}

    def start(self) -> None:
        self._base = {name: self._read(name) for name in self.pids}

    def spent(self) -> dict[str, float]:
        return {name: self._read(name) - self._base.get(name, 0.0) for name in self.pids}

    def _read(self, name: str) -> float:
        try:
            return _cpu_seconds(self.pids[name], reaped=name in self.reaped)
        except (OSError, IndexError, ValueError):
            return 0.0
