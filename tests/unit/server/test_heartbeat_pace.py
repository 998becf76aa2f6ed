"""The heartbeat interval the server names stretches with the cluster
(`server.heartbeat_pace`): at once when nodes join, and when they leave, the
lease and the node timeout stay long until every agent has heard the
shorter interval."""

from __future__ import annotations

from schedulearn.server.heartbeat_pace import HeartbeatPace
from schedulearn.server.services.agents import AgentTiming

BASE = AgentTiming(
    heartbeat_seconds=2.0,
    node_timeout_seconds=10.0,
    stop_grace_seconds=10.0,
    gang_base_port=29500,
    checkpoint_dir=None,
    lease_seconds=7.5,
    lease_grace_seconds=1.5,
)


def figures(pace: HeartbeatPace) -> tuple[float, float, float | None]:
    t = pace.timing
    return t.heartbeat_seconds, t.node_timeout_seconds, t.lease_seconds


def test_up_to_the_rate_nothing_stretches_past_it_all_three_grow_together() -> None:
    pace = HeartbeatPace(BASE, max_per_second=100.0)  # 200 nodes at 2 s
    pace.observe(200, now=0.0)
    assert figures(pace) == (2.0, 10.0, 7.5)
    pace.observe(1000, now=5.0)
    assert figures(pace) == (10.0, 50.0, 37.5)
    assert pace.timing.lease_grace_seconds == 1.5  # a job's SIGTERM-to-SIGKILL time stays


def test_a_smaller_cluster_hears_the_short_interval_first_the_timeout_shrinks_later() -> None:
    pace = HeartbeatPace(BASE, max_per_second=100.0)
    pace.observe(1000, now=0.0)
    pace.observe(200, now=5.0)
    # Agents that heard "every 10 s" just before may be silent that long once more.
    assert figures(pace) == (2.0, 50.0, 37.5)
    pace.observe(200, now=54.0)
    assert figures(pace) == (2.0, 50.0, 37.5)
    pace.observe(200, now=55.0)  # one old node timeout after the interval shrank
    assert figures(pace) == (2.0, 10.0, 7.5)


def test_without_a_rate_the_configured_timing_holds_at_any_size() -> None:
    pace = HeartbeatPace(BASE, max_per_second=None)
    pace.observe(100_000, now=0.0)
    assert pace.timing == BASE
    assert pace.due(now=4.0) is False and pace.due(now=5.0) is True
