"""The guarantee invariant over several passes, as time moves past the minimum run time.

`test_fairshare.py` checks one pass. Here a random snapshot is carried
through passes at `now`, `now + min_run / 2`, `now + min_run` and
`now + 2 min_run + 1` and a second later (each pass's decisions applied, no job ending), so
jobs started by one pass become preemptible victims in a later one.
After every pass: a queue below its guarantee with a waiting job that
fits in the guarantee is not left so while preemptible jobs of queues
over their guarantee, run at least `min_run`, could make room for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from test_fairshare import tenant_snapshots

from schedulearn.core import (
    ClusterView,
    Decision,
    GpuLedger,
    NodeView,
    Preempt,
    Resize,
    Start,
    create,
)
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import shares
from schedulearn.core.placement import FreePool
from schedulearn.core.preemption import make_room

SPECS = ["fifo", "tiresias", "srtf", "timeslice:quantum=10"]


def after_pass(view: ClusterView, decisions: Sequence[Decision], now: float) -> ClusterView:
    """The snapshot at `now` with `decisions` applied (the ledger checks every rule)."""
    ledger = GpuLedger(NodeView.new(n.name, n.num_gpus) for n in view.nodes)
    jobs = {j.id: j for j in [*view.pending, *view.running]}
    for j in view.running:
        assert j.placement is not None
        ledger.apply([Start(j.id, j.placement)], {j.id: j})
    ledger.apply(decisions, jobs)
    running = {j.id: j for j in view.running}
    pending = {j.id: j for j in view.pending}
    for d in decisions:
        if isinstance(d, Start):
            running[d.job_id] = replace(
                pending.pop(d.job_id), placement=d.placement, started_at=view.now
            )
        elif isinstance(d, Preempt):
            old = running.pop(d.job_id)
            pending[d.job_id] = replace(old, placement=None, started_at=None)
        else:
            assert isinstance(d, Resize)
            running[d.job_id] = replace(running[d.job_id], placement=d.placement)
    return replace(
        view,
        now=now,
        nodes=tuple(ledger.node_view(n.name) for n in view.nodes),
        pending=tuple(sorted(pending.values(), key=lambda j: (j.submitted_at, j.id))),
        running=tuple(running.values()),
        free_counts=None,
    )


def assert_guarantees_kept(view: ClusterView, min_run: float) -> None:
    assert view.tenancy is not None
    book = shares(view, view.tenancy)
    # Every pending job is judged, also one this very pass suspended (the
    # inner policy preempting inside its queue): the layer must not leave
    # its queue below its guarantee until the next pass.
    for j in view.pending:
        s = book[j.queue]
        if s.used + j.gpus > s.guaranteed or not s.may_hold(j):
            continue
        victims = [
            r
            for r in view.running
            if r.preemptible
            and r.queue != j.queue
            and book[r.queue].used > book[r.queue].guaranteed
            and r.started_at is not None
            and view.now - r.started_at >= min_run
        ]
        pool = FreePool(view)
        room = make_room(pool, j, victims, pool.total_free())
        assert room is None, (
            f"at {view.now}: queue {j.queue} uses {s.used} of its {s.guaranteed} guaranteed "
            f"GPUs, job {j.id} ({j.gpus} GPUs) waits, and preempting {[v.id for v in room[1]]} "
            "would start it"
        )


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=tenant_snapshots())
def test_no_queue_is_left_below_its_guarantee_across_passes(
    spec: str, snapshot: tuple[ClusterView, float]
) -> None:
    view, min_run = snapshot
    policy = FairShare(create(spec), min_run=min_run)
    start = view.now
    for later in (min_run / 2, min_run, 2 * min_run + 1, 2 * min_run + 2):
        done = after_pass(view, policy.decide(view), view.now)
        # Judged at the pass's own time, on the state the pass left.
        assert_guarantees_kept(done, min_run)
        view = replace(done, now=start + later)
