"""The contract every scheduling policy meets.

A policy reads a `ClusterView` and returns decisions. It does no I/O and
reads no clock: time is `view.now`. The same object is driven by the
simulator and by the live scheduler loop.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

from schedulearn.core.decisions import Decision
from schedulearn.core.views import ClusterView


@runtime_checkable
class Policy(Protocol):
    """A scheduling policy.

    `name` is the registry key. `tick_seconds` asks the host to call
    `decide` at least that often while jobs wait or run, for policies
    whose choices change with time alone (quanta, attained service);
    None means "only when something happens".
    """

    name: ClassVar[str]
    tick_seconds: ClassVar[float | None]

    def decide(self, view: ClusterView) -> list[Decision]: ...
