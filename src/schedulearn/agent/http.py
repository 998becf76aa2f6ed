"""httpx for the agent, without httpx's command-line tool.

httpx's package imports its own command-line tool (`httpx._main`) at import
time, and that imports click, Rich and Pygments whenever they are installed
(they are: Typer, which runs the agent's command line, brings them). That
was 0.26 s of each agent's start on a 2-core machine, more than half of
importing httpx, for a tool the agent never runs. Importing httpx through
this module puts an empty stand-in for that tool first; a process that
imported httpx before keeps its own.
"""

from __future__ import annotations

import sys
import types

if "httpx" not in sys.modules:
    _tool = types.ModuleType("httpx._main")
    _tool.main = lambda: None  # type: ignore[attr-defined]  # httpx only re-exports `main`
    sys.modules.setdefault("httpx._main", _tool)

import httpx

__all__ = ["httpx"]
