"""The fair-share layer: guarantees, reclaim after the minimum run time, limits,
non-preemptible jobs borrowing and requeued, deserved shares with decayed
usage, reasons; and, on random snapshots around every registered policy,
valid, deterministic passes and the guarantee invariant."""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_scenario import Scenario, job, node, preempts, starts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from snapshots import NOW, fill, replay

from schedulearn.core import (
    ClusterView,
    FreePool,
    InvalidDecision,
    JobView,
    NodeView,
    Preempt,
    Start,
    available,
    create,
)
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import Queue, Tenancy, UsageMeter, shares
from schedulearn.core.fairshare_reasons import ShareRule, share_reason
from schedulearn.core.preemption import make_room

TWO = Tenancy((Queue.of("A", 2), Queue.of("B", 2)))


def with_queues(view: ClusterView, tenancy: Tenancy = TWO) -> ClusterView:
    return replace(view, tenancy=tenancy)


def a_fills_four(started_at: float = 0.0) -> Scenario:
    sc = Scenario(node("n", 4))
    for i in range(4):
        sc.run(job(i, 1, queue="A", preemptible=True), {"n": [i]}, started_at=started_at)
    return sc


@pytest.mark.parametrize("spec", ["fifo", "srtf", "tiresias", "edf", "timeslice"])
def test_a_queue_below_its_guarantee_takes_two_gpus_back(spec: str) -> None:
    sc = a_fills_four()
    b = [job(10, 1, queue="B", preemptible=True), job(11, 1, queue="B", preemptible=True)]
    decisions = FairShare(create(spec), min_run=60).decide(with_queues(sc.view(1000.0, b)))
    assert set(starts(decisions)) == {10, 11}
    assert len(preempts(decisions)) == 2
    assert preempts(decisions) <= {0, 1, 2, 3}
    sc.ledger.apply(decisions, {j.id: j for j in [*b, *sc.running]})


def test_nothing_is_taken_back_before_the_minimum_run_time() -> None:
    sc = a_fills_four(started_at=950.0)
    b = [job(10, 1, queue="B", preemptible=True)]
    fs = FairShare(create("fifo"), min_run=60)
    assert fs.decide(with_queues(sc.view(1000.0, b))) == []
    assert fs.decide(with_queues(sc.view(1005.0, b))) == []  # a quiet pass, remembered
    # The same snapshot once the jobs have run 60 s: B gets its GPU (the
    # remembered quiet pass does not hide a job crossing min_run).
    assert set(starts(fs.decide(with_queues(sc.view(1010.0, b))))) == {10}
    assert fs.tick_seconds == 60


def test_a_non_preemptible_job_borrows_idle_gpus_and_is_requeued_when_they_are_reclaimed() -> None:
    # A is guaranteed 2 of 4 GPUs; its two non-preemptible jobs need 3: both
    # start, the second on GPUs B does not use now (borrowed).
    sc = Scenario(node("n", 4))
    pinned = [job(1, 2, queue="A", preemptible=False), job(2, 1, queue="A", preemptible=False)]
    decisions = FairShare(create("fifo")).decide(with_queues(sc.view(10.0, pinned)))
    assert set(starts(decisions)) == {1, 2}
    # A holds all 4 with non-preemptible jobs; B (guaranteed 2) submits one
    # job: once they have run min_run, the latest started borrower is
    # requeued, its Preempt naming the queue that reclaimed.
    sc = Scenario(node("n", 4))
    for i in range(4):
        sc.run(job(i, 1, queue="A", preemptible=False), {"n": [i]}, started_at=float(i))
    b = [job(10, 1, queue="B", preemptible=True)]
    fs = FairShare(create("fifo"), min_run=300)
    assert fs.decide(with_queues(sc.view(200.0, b))) == []
    decisions = fs.decide(with_queues(sc.view(1000.0, b)))
    assert set(starts(decisions)) == {10}
    assert [d for d in decisions if isinstance(d, Preempt)] == [Preempt(3, reclaimed_by="B")]
    sc.ledger.apply(decisions, {j.id: j for j in [*b, *sc.running]})  # the ledger allows it
    # Without the reclaim's mark the ledger still refuses to stop such a job.
    with pytest.raises(InvalidDecision, match="not preemptible"):
        sc.ledger.apply([Preempt(2)], {j.id: j for j in sc.running})


def test_a_remembered_quiet_pass_is_redone_when_the_jobs_change() -> None:
    sc = Scenario(node("n", 4))
    for i in range(3):
        sc.run(job(i, 1, queue="A", preemptible=True), {"n": [i]}, started_at=990.0)
    fs = FairShare(create("fifo"), min_run=60)
    big = [job(10, 2, queue="B", preemptible=True)]
    assert fs.decide(with_queues(sc.view(1000.0, big))) == []  # 1 GPU free, none to take yet
    small = [*big, job(11, 1, queue="B", preemptible=True)]
    assert set(starts(fs.decide(with_queues(sc.view(1001.0, small))))) == {11}


def test_idle_gpus_are_lent_and_a_limit_holds() -> None:
    sc = Scenario(node("n", 4))
    a = [job(i, 1, queue="A", preemptible=True) for i in range(6)]
    decisions = FairShare(create("fifo")).decide(with_queues(sc.view(10.0, a)))
    assert len(starts(decisions)) == 4  # B wants nothing: A borrows its 2 GPUs
    limited = Tenancy((Queue.of("A", 2, limit=3), Queue.of("B", 2)))
    decisions = FairShare(create("fifo")).decide(with_queues(sc.view(10.0, a), limited))
    assert len(starts(decisions)) == 3
    sc.run(a[0], {"n": [0]})
    sc.run(a[1], {"n": [1]})
    sc.run(a[2], {"n": [2]})
    reason = share_reason(with_queues(sc.view(10.0, a[3:]), limited), a[3])
    assert reason is not None and reason.rule is ShareRule.LIMIT
    assert reason.message == "A uses 3 of its limit of 3 GPUs"


def test_freed_gpus_go_first_to_the_queue_below_its_deserved_share() -> None:
    # No guarantees; B weighs 3 times A: B deserves 6 of 8 GPUs. A holds all
    # 8: with no guarantee B takes nothing back, but the GPU A's job frees
    # goes to B's job, not to A's older waiting one.
    tenancy = Tenancy((Queue("A", weight=1.0), Queue("B", weight=3.0)))
    sc = Scenario(node("n", 8))
    for i in range(8):
        sc.run(job(i, 1, queue="A", preemptible=True), {"n": [i]})
    pending = [job(20 + i, 1, queue="A", preemptible=True) for i in range(4)]
    pending += [job(30 + i, 1, queue="B", preemptible=True) for i in range(8)]
    view = with_queues(sc.view(1000.0, pending), tenancy)
    assert shares(view, tenancy)["B"].share == pytest.approx(6.0)
    assert FairShare(create("fifo"), min_run=0).decide(view) == []
    reason = share_reason(view, pending[0])
    assert reason is not None and reason.rule is ShareRule.OVER_SHARE
    assert reason.message.startswith("A uses 8 of its 0 guaranteed GPUs")
    sc.running.pop()
    sc.ledger.release(7)
    freed = with_queues(sc.view(1000.0, pending), tenancy)
    assert set(starts(FairShare(create("fifo"), min_run=0).decide(freed))) == {30}


def test_decayed_usage_shrinks_the_share_of_the_queue_that_used_more() -> None:
    meter = UsageMeter(half_life=100.0)
    meter.change(0.0, "A", 4)
    meter.change(100.0, "A", -4)
    usage = meter.usage_at(100.0)
    assert usage["A"] == pytest.approx(4 * 100 / 2 / 0.6931471805599453, rel=1e-6)
    assert meter.usage_at(200.0)["A"] == pytest.approx(usage["A"] / 2)
    # A used the cluster lately: its weight counts a quarter, so of 4 idle
    # GPUs it deserves 0.8, B 3.2. A's first job starts (A is below its
    # share), then B's three, though A's other jobs came first.
    tenancy = Tenancy((Queue("A"), Queue("B")), usage={"A": 5000.0, "B": 0.0})
    sc = Scenario(node("n", 4))
    pending = [job(i, 1, queue="A", preemptible=True) for i in range(1, 5)]
    pending += [job(i, 1, queue="B", preemptible=True) for i in range(5, 9)]
    view = with_queues(sc.view(10.0, pending), tenancy)
    assert shares(view, tenancy)["A"].share == pytest.approx(0.8)
    assert set(starts(FairShare(create("fifo")).decide(view))) == {1, 5, 6, 7}


def test_without_queues_it_is_the_inner_policy() -> None:
    sc = a_fills_four()
    pending = [job(10, 2, preemptible=True)]
    view = sc.view(1000.0, pending)
    assert FairShare(create("srtf")).decide(view) == create("srtf").decide(view)


def test_a_queue_without_a_guarantee_takes_nothing_back_and_is_told_why() -> None:
    # "nobody" is not declared: no guarantee, weight 1. A holds 4 (2 of them
    # borrowed from B, which wants none): nobody waits for a GPU to free.
    sc = a_fills_four()
    pending = [job(10 + i, 1, queue="nobody", preemptible=True) for i in range(3)]
    view = with_queues(sc.view(1000.0, pending))
    assert FairShare(create("fifo"), min_run=0).decide(view) == []
    reason = share_reason(view, pending[0])
    assert reason is not None and reason.rule is ShareRule.HELD
    assert reason.message == (
        "needs 1 GPUs, 0 idle: not while A holds 4 GPUs (2 of its guarantee) "
        "(nobody uses 0 of its 0 guaranteed)"
    )


def test_queues_are_checked() -> None:
    with pytest.raises(ValueError, match="limit 2 is below its 4 guaranteed"):
        Queue.of("A", 4, limit=2)
    with pytest.raises(ValueError, match="queues named twice: A"):
        Tenancy((Queue("A"), Queue("A")))
    with pytest.raises(ValueError, match="weight must be above 0"):
        Queue("A", weight=0)


# --- random snapshots -----------------------------------------------------------

SPECS = [*available(), "srtf:margin=0:min_gain=0", "fifo:backfill=true"]
NAMES = ("A", "B", "C")


@st.composite
def tenant_snapshots(draw: st.DrawFn) -> tuple[ClusterView, float]:
    nodes = tuple(
        NodeView.new(f"n{i}", draw(st.integers(1, 8))) for i in range(draw(st.integers(1, 4)))
    )
    total = sum(n.num_gpus for n in nodes)
    min_run = draw(st.sampled_from([0.0, 300.0]))
    guaranteed = [draw(st.integers(0, max(0, total // 2))) for _ in NAMES]
    queues = tuple(
        Queue.of(
            name,
            g,
            draw(st.one_of(st.none(), st.integers(max(g, 1), total + 2))),
            draw(st.sampled_from([1.0, 2.0])),
        )
        for name, g in zip(NAMES, guaranteed, strict=True)
    )
    usage = {name: draw(st.sampled_from([0.0, 1e4])) for name in NAMES}

    def a_job(job_id: int) -> JobView:
        return JobView(
            id=job_id,
            submitted_at=draw(st.floats(0, NOW)),
            gpus=draw(st.integers(1, 4)),
            queue=draw(st.sampled_from(NAMES)),
            preemptible=draw(st.sampled_from([True, True, False])),
            estimated_duration=draw(st.one_of(st.none(), st.floats(1, 5000))),
            attained_gpu_seconds=draw(st.sampled_from([0.0, 1e5])),
        )

    started_at = st.sampled_from([0.0, 900.0, NOW])
    snapshot = fill(draw, nodes, a_job, running=10, pending=(0, 8), started_at=started_at)
    view = snapshot.view(tenancy=Tenancy(queues, usage))
    return view, min_run


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=tenant_snapshots())
def test_a_pass_is_valid_deterministic_and_keeps_guarantees(
    spec: str, snapshot: tuple[ClusterView, float]
) -> None:
    view, min_run = snapshot
    decisions = FairShare(create(spec), min_run=min_run).decide(view)
    assert FairShare(create(spec), min_run=min_run).decide(view) == decisions
    assert view.tenancy is not None
    # Valid: the ledger refuses a GPU given twice, a broken gang, a
    # non-preemptible job preempted.
    ledger = replay(view, decisions)
    jobs = {j.id: j for j in [*view.pending, *view.running]}

    # The state after the pass.
    started = starts(decisions)
    gone = preempts(decisions) | {d.job_id for d in decisions if not isinstance(d, Start)}
    running = [j for j in view.running if j.id not in gone]
    running += [
        replace(j, placement=started[j.id], started_at=view.now)
        for j in view.pending
        if j.id in started
    ]
    # Resized jobs keep running on their new placement.
    for d in decisions:
        if not isinstance(d, Preempt) and d.job_id in gone and d.job_id not in preempts(decisions):
            old = jobs[d.job_id]
            running.append(replace(old, placement=d.placement))
    pending = [j for j in view.pending if j.id not in started]
    after = replace(
        view,
        nodes=tuple(ledger.node_view(n.name) for n in view.nodes),
        pending=tuple(pending),
        running=tuple(running),
        free_counts=None,
    )
    book = shares(after, view.tenancy)

    for s in book.values():
        # Limits hold (a queue already over its limit only shrinks).
        before = shares(view, view.tenancy)[s.name]
        assert s.used <= max(s.cap, before.used)
    assert_no_reclaim_left(view, after, min_run)


def assert_no_reclaim_left(before: ClusterView, after: ClusterView, min_run: float) -> None:
    """The guarantee invariant: no queue below its guarantee has a waiting job
    that fits in it while jobs the reclaim may take could make room for it.

    What the reclaim may take, written out here apart from the layer: jobs
    of other queues over their deserved share (as the pass saw it) that have
    run `min_run`, preemptible ones first, then the latest started, while
    their queue keeps its guarantee; non-preemptible ones too (requeued).
    A queue not behind, one that has had at least 80% of its guaranteed
    fraction of the GPU-time used lately (decayed usage), is kept to its
    guarantee over time, not now: it does not reclaim."""
    assert before.tenancy is not None
    deserved = {name: s.share for name, s in shares(before, before.tenancy).items()}
    book = shares(after, before.tenancy)
    usage = before.tenancy.usage
    used_lately = sum(u for u in usage.values() if u > 0)

    def ahead(name: str) -> bool:
        fraction = book[name].guaranteed / before.total_gpus
        return used_lately > 0 and usage.get(name, 0.0) >= used_lately * fraction * 0.8

    # A job the pass itself suspended (the inner policy reordering its own
    # queue) waits for a later pass: a job appears once in a pass.
    suspended = {j.id for j in before.running}
    for j in after.pending:
        if j.id in suspended:
            continue

        # A job larger than its queue's own guarantee runs on borrowed GPUs
        # only: it takes nothing from the guarantee, and may always be taken.
        def beyond(r: JobView) -> bool:
            own = book[r.queue].queue.guaranteed_gpus + book[r.queue].uncovered
            return own > 0 and r.gpus > own

        def fitting(name: str) -> int:
            held = [r for r in after.running if r.queue == name and not beyond(r)]
            return sum(r.allocated_gpus for r in held)

        s = book[j.queue]
        if fitting(j.queue) + j.gpus > s.guaranteed or not s.may_hold(j) or ahead(j.queue):
            continue
        victims: list[JobView] = []
        for name, owner in book.items():
            if name == j.queue or owner.used <= deserved.get(name, 0.0):
                continue
            budget = fitting(name) - owner.guaranteed
            mine = [
                r
                for r in after.running
                if r.queue == name
                and r.started_at is not None
                and after.now - r.started_at >= min_run
            ]
            # Preemptible ones first, then the latest started.
            mine.sort(key=lambda r: (not r.preemptible, -(r.started_at or 0.0), -r.id))
            for r in mine:
                if beyond(r):
                    victims.append(replace(r, preemptible=True))
                elif r.allocated_gpus <= budget:
                    budget -= r.allocated_gpus
                    victims.append(replace(r, preemptible=True))
        pool = FreePool(after)
        room = make_room(pool, j, victims, pool.total_free())
        assert room is None, (
            f"at {after.now}: queue {j.queue} uses {s.used} of its {s.guaranteed} guaranteed "
            f"GPUs, job {j.id} ({j.gpus} GPUs) waits, and preempting "
            f"{[v.id for v in room[1]]} would start it"
        )


def test_the_layer_asks_for_goodput_reports_when_its_policy_does() -> None:
    from schedulearn.core import create

    assert FairShare(create("goodput")).uses_goodput
    assert not FairShare(create("fifo")).uses_goodput
