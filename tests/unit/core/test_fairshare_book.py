"""The fair-share layer's book (`ShareBook`): what it keeps between passes
answers what a fresh sweep of the snapshot answers, for the pass at hand."""

from __future__ import annotations

from dataclasses import replace

from core_scenario import Scenario, job, node

from schedulearn.core import create
from schedulearn.core.fairshare import FairShare
from schedulearn.core.fairshare_book import ShareBook
from schedulearn.core.fairshare_queues import DEFAULT_QUEUE, Queue, Tenancy, named, sweep
from schedulearn.core.views import ClusterView

TENANCY = Tenancy((Queue.of("A", 2), Queue.of("B", 1), Queue.of(DEFAULT_QUEUE, 1)))


def busy() -> Scenario:
    sc = Scenario(node("n", 4), node("m", 4))
    sc.run(job(0, 2, queue="", preemptible=True), {"n": [0, 1]}, started_at=0.0)
    sc.run(job(1, 1, queue="A", preemptible=False), {"n": [2]}, started_at=0.0)
    sc.run(job(2, 4, queue="B", preemptible=True), {"m": [0, 1, 2, 3]}, started_at=0.0)
    return sc


def counts(view: ClusterView, book: ShareBook) -> object:
    shares, by_queue = book.shares(view, TENANCY)
    return (
        {n: (s.used, s.pinned, s.pending, s.share) for n, s in shares.items()},
        {q: [j.id for j in js] for q, js in by_queue.items()},
    )


def fresh(view: ClusterView) -> object:
    shares, by_queue = sweep(view, TENANCY)
    return (
        {n: (s.used, s.pinned, s.pending, s.share) for n, s in shares.items()},
        {q: [j.id for j in js] for q, js in by_queue.items()},
    )


def test_named_puts_jobs_that_name_no_queue_in_the_default_queue() -> None:
    pending = [job(10, 1, queue=""), job(11, 2, queue="A"), job(12, 1, queue="")]
    view = replace(busy().view(100.0, pending), tenancy=TENANCY)
    got = ShareBook().named(view)
    assert got.pending == named(view).pending
    assert got.running == named(view).running
    assert {j.queue for j in got.pending} == {DEFAULT_QUEUE, "A"}
    assert {j.queue for j in got.running} == {DEFAULT_QUEUE, "A", "B"}


def test_named_returns_the_view_itself_when_every_job_names_a_queue() -> None:
    sc = Scenario(node("n", 4))
    sc.run(job(0, 2, queue="A", preemptible=True), {"n": [0, 1]}, started_at=0.0)
    view = replace(sc.view(100.0, [job(10, 1, queue="B")]), tenancy=TENANCY)
    assert ShareBook().named(view) is view


def test_the_book_kept_across_passes_counts_what_a_fresh_sweep_counts() -> None:
    # One book over a sequence of snapshots whose tuples change one at a
    # time (a job arrives, one starts, one ends), as a host hands them.
    book = ShareBook()
    sc = busy()
    steps = [
        [job(10, 1, queue=""), job(11, 2, queue="A")],
        [job(10, 1, queue=""), job(11, 2, queue="A"), job(12, 4, queue="B")],
        [job(11, 2, queue="A"), job(12, 4, queue="B")],
    ]
    base = sc.view(100.0, steps[0])
    for k, pending in enumerate(steps):
        view = replace(base, pending=tuple(pending), tenancy=TENANCY)
        if k == 2:  # job 0 ended: the running tuple changes too
            view = replace(view, running=tuple(j for j in view.running if j.id != 0))
        for _ in range(2):  # the same tuples again: the kept counts
            assert counts(book.named(view), book) == fresh(named(view))
            assert book.pending_by_id() == {j.id: j for j in named(view).pending}


def test_a_layer_kept_across_passes_decides_what_a_fresh_one_does() -> None:
    kept = FairShare(create("fifo"), min_run=60)
    sc = busy()
    base = replace(sc.view(1000.0, []), tenancy=TENANCY)
    for pending in (
        [job(10, 1, queue=""), job(11, 2, queue="A")],
        [job(11, 2, queue="A"), job(12, 1, queue="")],
        [job(12, 1, queue=""), job(13, 3, queue="B", preemptible=True)],
    ):
        view = replace(base, pending=tuple(pending))
        assert kept.decide(view) == FairShare(create("fifo"), min_run=60).decide(view)
