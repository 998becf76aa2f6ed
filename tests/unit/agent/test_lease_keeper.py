"""The lease's arithmetic and the agent's keeper of it, on a manual clock.

The guard process and the agent's reaction to a lapse are exercised with
real processes in tests/integration/agent/test_one_live_copy.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from schedulearn.agent import lease as leases
from schedulearn.agent.lease import Lease
from schedulearn.agent.leasekeeper import LeaseKeeper
from schedulearn.clock import ManualClock
from schedulearn.settings import LEASE_SHARE, ServerSettings


def test_a_lease_counts_from_when_the_request_was_sent() -> None:
    lease = Lease.granted(sent_at=100.0, seconds=6.0, grace=1.5)
    assert lease.expires == 106.0
    assert lease.left(104.0) == 2.0
    assert not lease.lapsed(105.9)
    assert lease.lapsed(106.0)
    assert Lease.granted(0.0, 1.0, -3.0).grace == 0.0


def test_the_later_of_two_leases_is_kept_when_replies_cross() -> None:
    early, late = Lease(10.0, 1.0), Lease(12.0, 1.0)
    assert late.later(early) is late
    assert early.later(late) is late
    assert early.later(None) is early


def test_the_lease_file_round_trips_and_clears(tmp_path: Path) -> None:
    assert leases.read(tmp_path) is None
    leases.write(tmp_path, Lease(42.5, 2.0))
    assert leases.read(tmp_path) == Lease(42.5, 2.0)
    (tmp_path / leases.LEASE_FILE).write_text("{not json")
    assert leases.read(tmp_path) is None
    leases.clear(tmp_path)
    assert not (tmp_path / leases.LEASE_FILE).exists()


def keeper(tmp_path: Path, clock: ManualClock, lapses: list[int]) -> LeaseKeeper:
    return LeaseKeeper(
        tmp_path, on_lapse=lambda: lapses.append(1), clock=clock.now, start_guard=False
    )


def test_a_renewed_lease_does_not_lapse(tmp_path: Path) -> None:
    clock, lapses = ManualClock(1000.0), list[int]()
    kept = keeper(tmp_path, clock, lapses)
    kept.reset(Lease.granted(clock.now(), 5.0, 1.0))
    for _ in range(10):
        clock.advance(2.0)
        assert not kept.check()
        kept.renew(Lease.granted(clock.now(), 5.0, 1.0))
    assert leases.read(tmp_path) == Lease(clock.now() + 5.0, 1.0)
    assert lapses == []


def test_a_lapse_is_told_once_and_renewals_wait_for_the_next_registration(
    tmp_path: Path,
) -> None:
    clock, lapses = ManualClock(1000.0), list[int]()
    kept = keeper(tmp_path, clock, lapses)
    kept.reset(Lease.granted(clock.now(), 5.0, 1.0))
    clock.advance(5.0)
    assert kept.check() and kept.check()
    assert lapses == [1]
    # A heartbeat's reply after the lapse renews nothing: the guard may have acted.
    kept.renew(Lease.granted(clock.now(), 5.0, 1.0))
    assert kept.lapsed
    assert leases.read(tmp_path) == Lease(1005.0, 1.0)
    # Registering again starts afresh.
    kept.reset(Lease.granted(clock.now(), 5.0, 1.0))
    assert not kept.lapsed and not kept.check()
    assert leases.read(tmp_path) == Lease(clock.now() + 5.0, 1.0)


def test_a_renewal_written_after_the_old_lease_ended_counts_as_a_lapse(tmp_path: Path) -> None:
    """The request went out in time, but its reply came after the lease's end: the guard
    may already have stopped the jobs, so the agent must register again."""
    clock, lapses = ManualClock(1000.0), list[int]()
    kept = keeper(tmp_path, clock, lapses)
    kept.reset(Lease.granted(clock.now(), 5.0, 1.0))
    sent = clock.now() + 4.0
    clock.advance(6.0)
    kept.renew(Lease.granted(sent, 5.0, 1.0))
    assert kept.check()
    assert lapses == [1]


def test_without_a_lease_nothing_lapses(tmp_path: Path) -> None:
    clock, lapses = ManualClock(1000.0), list[int]()
    kept = keeper(tmp_path, clock, lapses)
    kept.reset(None)  # a server that grants none (an older release)
    clock.advance(1e6)
    assert not kept.check()
    assert lapses == []
    assert leases.read(tmp_path) is None


def test_the_default_lease_and_grace_fit_inside_the_node_timeout() -> None:
    for timeout in (3.0, 10.0, 15.0, 60.0):
        settings = ServerSettings(node_timeout_seconds=timeout, heartbeat_seconds=0.5)
        lease, grace = settings.lease
        assert lease > 0 and grace >= 0
        assert lease + grace <= LEASE_SHARE * timeout


def test_a_lease_as_long_as_the_node_timeout_is_refused_with_what_to_change() -> None:
    with pytest.raises(ValidationError) as refused:
        ServerSettings(node_timeout_seconds=10.0, lease_seconds=10.0)
    message = str(refused.value)
    assert "must stay under" in message
    assert "SCHEDULEARN_LEASE_SECONDS" in message
    with pytest.raises(ValidationError, match="longer than heartbeat_seconds"):
        ServerSettings(node_timeout_seconds=10.0, heartbeat_seconds=4.0, lease_seconds=3.0)
    assert ServerSettings(node_timeout_seconds=10.0, lease_seconds=7.0, lease_grace_seconds=2.0)
