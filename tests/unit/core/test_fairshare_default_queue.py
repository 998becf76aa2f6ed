"""The unnamed queue ("") is the default queue ("default"): a declared
`default` queue's guarantee, weight and usage apply to jobs that name no
queue (before, they fell into an undeclared best-effort queue and were
never served by the share rounds)."""

from __future__ import annotations

from dataclasses import replace

from core_scenario import Scenario, job, node, preempts, starts

from schedulearn.core import Placement, Preempt, create
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_queues import (
    DEFAULT_QUEUE,
    Queue,
    Tenancy,
    UsageMeter,
    named,
    shares,
)
from schedulearn.core.fairshare_reasons import (
    ShareRule,
    never_starts,
    overcommitted,
    promised,
    share_reason,
)

TENANCY = Tenancy((Queue.of("A", 2), Queue.of(DEFAULT_QUEUE, 2)))


def a_fills_four() -> Scenario:
    sc = Scenario(node("n", 4))
    for i in range(4):
        sc.run(job(i, 1, queue="A", preemptible=True), {"n": [i]}, started_at=0.0)
    return sc


def test_a_job_with_no_queue_gets_the_default_queues_guarantee() -> None:
    sc = a_fills_four()
    unnamed = [job(10, 1, queue="", preemptible=True), job(11, 1, queue="", preemptible=True)]
    view = replace(sc.view(1000.0, unnamed), tenancy=TENANCY)
    decisions = FairShare(create("fifo"), min_run=60).decide(view)
    assert set(starts(decisions)) == {10, 11}
    assert len(preempts(decisions)) == 2


def test_unnamed_jobs_are_served_in_the_share_round() -> None:
    # A 4-GPU node with 2 free; "" has waiting work, A also waits: the
    # default queue is below its guarantee and goes first.
    sc = Scenario(node("n", 4))
    sc.run(job(0, 2, queue="A", preemptible=True), {"n": [0, 1]}, started_at=0.0)
    pending = [job(10, 2, queue="A", preemptible=True), job(11, 2, queue="", preemptible=True)]
    view = replace(sc.view(1000.0, pending), tenancy=TENANCY)
    decisions = FairShare(create("fifo"), min_run=60).decide(view)
    assert starts(decisions) == {11: starts(decisions)[11]}


def test_the_reason_names_the_default_queue() -> None:
    sc = Scenario(node("n", 4))
    for i in range(4):
        sc.run(job(i, 1, queue="", preemptible=True), {"n": [i]}, started_at=0.0)
    pending = [job(10, 1, queue=""), job(11, 1, queue="A")]
    view = replace(sc.view(1000.0, pending), tenancy=TENANCY)
    why = share_reason(view, view.pending[0])
    assert why is not None and why.queue == DEFAULT_QUEUE
    assert "default uses 4 of its 2 guaranteed GPUs" in why.message


def test_usage_of_unnamed_jobs_counts_for_the_default_queue() -> None:
    meter = UsageMeter(None)
    meter.change(0.0, "", 2)
    assert meter.usage_at(10.0) == {DEFAULT_QUEUE: 20.0}


# --- jobs that name no queue keep running once queues exist (issue 32, item 4) ---


def test_the_default_queue_owns_the_gpus_no_guarantee_covers() -> None:
    # `queue add team-a --guaranteed 2` on an 8-GPU cluster: plain jobs (no
    # queue, not preemptible) start on the 6 GPUs no guarantee covers, and
    # beyond them on GPUs team-a does not use.
    tenancy = Tenancy((Queue.of("team-a", 2),))
    sc = Scenario(node("n0", 4), node("n1", 4))
    plain = [job(i, 2, queue="") for i in range(4)]
    view = replace(sc.view(10.0, plain), tenancy=tenancy)
    book = shares(named(view), tenancy)
    assert book[DEFAULT_QUEUE].guaranteed == 6 and book["team-a"].guaranteed == 2
    assert set(starts(FairShare(create("fifo")).decide(view))) == {0, 1, 2, 3}


def test_a_plain_job_borrowing_team_as_gpus_is_requeued_when_team_a_returns() -> None:
    tenancy = Tenancy((Queue.of("team-a", 2),))
    sc = Scenario(node("n0", 4), node("n1", 4))
    for i in range(4):
        sc.run(job(i, 2, queue=""), {f"n{i // 2}": [2 * (i % 2), 2 * (i % 2) + 1]}, 10.0 * i)
    mine = [job(20, 2, queue="team-a", preemptible=True)]
    view = replace(sc.view(1000.0, mine), tenancy=tenancy)
    why = share_reason(view, mine[0])
    assert why is not None and why.rule is ShareRule.RECLAIM
    assert why.message == (
        "team-a uses 0 of its 2 guaranteed GPUs: it takes back GPUs borrowed by default (2) "
        "once their jobs have run the minimum time"
    )
    decisions = FairShare(create("fifo"), min_run=300).decide(view)
    assert set(starts(decisions)) == {20}
    # The latest started plain job goes back to the queue, marked as a reclaim.
    assert [d for d in decisions if isinstance(d, Preempt)] == [Preempt(3, reclaimed_by="team-a")]
    sc.ledger.apply(decisions, {j.id: j for j in [*mine, *sc.running]})


def test_a_job_held_by_other_queues_guarantees_is_told_whose() -> None:
    tenancy = Tenancy((Queue.of("team-a", 4), Queue.of("team-b", 4)))
    sc = Scenario(node("n0", 8))
    sc.run(job(1, 4, queue="team-a", preemptible=True), {"n0": [0, 1, 2, 3]})
    sc.run(job(2, 4, queue="team-b", preemptible=True), {"n0": [4, 5, 6, 7]})
    waiting = [job(3, 1, queue="")]
    view = replace(sc.view(10.0, waiting), tenancy=tenancy)
    why = share_reason(view, waiting[0])
    assert why is not None and why.rule is ShareRule.HELD
    assert why.message == (
        "needs 1 GPUs, 0 idle: not while team-a holds 4 GPUs of its guarantee, team-b 4 "
        "(default uses 0 of its 0 guaranteed)"
    )
    assert FairShare(create("fifo"), min_run=0).decide(view) == []


def test_a_job_that_can_never_start_is_told_what_to_change() -> None:
    tenancy = Tenancy((Queue.of("team-a", 2, limit=4),))
    assert never_starts(tenancy, job(1, 4, queue="team-a"), 8) is None
    assert never_starts(tenancy, job(1, 8, queue=""), 8) is None  # default: no limit
    assert never_starts(tenancy, job(1, 6, queue="team-a"), 8) == (
        "queue team-a may hold at most 4 GPUs (its limit) and this job asks for 6; "
        "ask for 4 or fewer, or raise the limit (schedulearn queue set team-a --limit 6)"
    )
    assert never_starts(None, job(1, 9), 8) == (
        "this job asks for 9 GPUs and the cluster has 8; ask for 8 or fewer"
    )


def test_guarantees_above_the_cluster_are_refused_unless_overcommitted() -> None:
    queues = (Queue.of("team-a", 4), Queue.of("team-b", 2), Queue("best"))
    assert promised(queues) == 6
    assert overcommitted(queues, 8) is None
    assert overcommitted((*queues, Queue.of("team-c", 4)), 8) == (
        "the guarantees would add up to 10 GPUs and the cluster has 8 "
        "(team-a 4, team-c 4, team-b 2): when every queue wants its guarantee, some "
        "cannot have it; lower a guarantee, or pass --overcommit to accept that"
    )


def test_a_reclaim_takes_a_job_still_stopping_before_a_new_victim() -> None:
    # Live: a reclaim's victims exit over several passes and, until then, are
    # shown as running (`JobView.stopping`). Here team-a's 2-GPU job took back
    # jobs 2 and 3 (the only ones past the 2 s grace then); job 2 has exited,
    # job 3 is still stopping, and job 4 has meanwhile passed the grace and is
    # the latest started. The reclaim must take job 3 again, not stop job 4
    # as well (found live: three plain jobs requeued for two GPUs).
    tenancy = Tenancy((Queue.of("team-a", 2),))
    sc = Scenario(node("n", 4))
    started = {3: 5.4, 4: 5.5, 5: 5.6}
    for gpu, (i, at) in enumerate(started.items(), start=1):
        sc.run(job(i, 1, queue="", stopping=i == 3), {"n": [gpu]}, started_at=at)
    pending = [job(6, 2, queue="team-a"), job(2, 1, queue="")]
    view = replace(sc.view(7.55, pending), tenancy=tenancy)
    decisions = FairShare(create("fifo"), min_run=2.0).decide(view)
    assert preempts(decisions) == {3}, decisions
    assert starts(decisions)[6] == Placement.of({"n": [0, 1]})


def test_an_inner_policy_under_queues_takes_a_job_still_stopping_first() -> None:
    # Tiresias inside queue A: job 2 is being stopped (it ran 1 s, so tiresias
    # would keep it and suspend job 1, which ran 100 s). Taking job 2 again
    # stops nobody new; suspending job 1 as well would stop one job too many.
    tenancy = Tenancy((Queue.of("A", 2),))
    sc = Scenario(node("n", 2))
    sc.run(job(1, 1, preemptible=True, queue="A"), {"n": [0]}, started_at=0.0)
    sc.run(job(2, 1, preemptible=True, queue="A", stopping=True), {"n": [1]}, started_at=99.0)
    newcomer = job(3, 1, preemptible=True, submitted_at=100.0, queue="A")
    view = replace(sc.view(100.0, [newcomer]), tenancy=tenancy)
    decisions = FairShare(create("tiresias:threshold=3"), min_run=0).decide(view)
    assert preempts(decisions) == {2} and set(starts(decisions)) == {3}, decisions
