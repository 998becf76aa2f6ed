"""How often nodes heartbeat, stretched with the size of the cluster.

Owns the stretch in force on this server (in memory, one per app): every
agent heartbeats at the interval the server's replies name, so the
server keeps its heartbeat load under `max_heartbeats_per_second` by
naming a longer interval as nodes join, as Nomad does with its
`max_heartbeats_per_second`. With N healthy nodes and a configured
interval I, the stretch is `max(1, N / (rate x I))`, and the interval,
the node timeout and the lease all grow by it (their ratios, which the
settings check, are kept): 1,000 nodes at the default 2 s and 100 a
second heartbeat every 10 s, and a silent node is marked down after 50 s
instead of 10.

Raising the stretch is safe at once: a longer interval comes in the same
reply as the longer lease, and the node timeout grows first. Lowering it
is not: an agent that heard the long interval just before may stay
silent that long once more. So a lower interval is named at once, but
the lease and the node timeout stay long for one old node timeout.

The scheduler counts the healthy nodes every `COUNT_SECONDS`
(`Scheduler._round`) and calls `observe`.
"""

from __future__ import annotations

import dataclasses

from schedulearn.server.services.agents import AgentTiming
from schedulearn.settings import ServerSettings

COUNT_SECONDS = 5.0  # how often the scheduler counts the healthy nodes


class HeartbeatPace:
    """The `AgentTiming` in force: the configured one, stretched with the cluster."""

    def __init__(self, base: AgentTiming, max_per_second: float | None) -> None:
        self.base = base
        self.max_per_second = max_per_second
        self.counted_at: float | None = None
        self._interval = 1.0  # the stretch of the interval named
        self._hold = 1.0  # the stretch of the lease and the node timeout
        self._lowered_at: float | None = None
        self._timing = base

    @classmethod
    def of(cls, settings: ServerSettings) -> HeartbeatPace:
        """The pace of a server with `settings`, before any node is counted."""
        lease, lease_grace = settings.lease
        base = AgentTiming(
            heartbeat_seconds=settings.heartbeat_seconds,
            node_timeout_seconds=settings.node_timeout_seconds,
            stop_grace_seconds=settings.stop_grace_seconds,
            gang_base_port=settings.gang_base_port,
            checkpoint_dir=settings.checkpoint_dir,
            lease_seconds=lease,
            lease_grace_seconds=lease_grace,
            checkpoint_max_bytes=settings.checkpoint_max_bytes,
        )
        return cls(base, settings.max_heartbeats_per_second)

    @property
    def timing(self) -> AgentTiming:
        """What replies name and the rules use now."""
        return self._timing

    @property
    def node_timeout(self) -> float:
        return self._timing.node_timeout_seconds

    def stretch_for(self, nodes: int) -> float:
        """The stretch `nodes` healthy nodes call for (1: none)."""
        if self.max_per_second is None:
            return 1.0
        return max(1.0, nodes / (self.max_per_second * self.base.heartbeat_seconds))

    def due(self, now: float) -> bool:
        """Whether the nodes should be counted again."""
        return self.counted_at is None or now - self.counted_at >= COUNT_SECONDS

    def observe(self, nodes: int, now: float) -> None:
        """`nodes` healthy nodes at `now`: the stretch follows."""
        self.counted_at = now
        want = self.stretch_for(nodes)
        self._interval = want
        if want >= self._hold:
            self._hold, self._lowered_at = want, None
        elif self._lowered_at is None:
            self._lowered_at = now
        elif now - self._lowered_at >= self._timing.node_timeout_seconds:
            # Every agent has heartbeat at the shorter interval since.
            self._hold, self._lowered_at = want, None
        self._timing = self._stretched()

    def _stretched(self) -> AgentTiming:
        base = self.base
        lease = None if base.lease_seconds is None else base.lease_seconds * self._hold
        return dataclasses.replace(
            base,
            heartbeat_seconds=base.heartbeat_seconds * self._interval,
            node_timeout_seconds=base.node_timeout_seconds * self._hold,
            lease_seconds=lease,
        )
