"""The running jobs an inner turn sees (`PassState._turn_running`) follow `may_preempt`.

`sub_view(turn=True)` writes `may_preempt` out for speed; over random
snapshots with queues, before and after a reclaim has moved the book,
each running job not decided on must be shown as it is when the inner
policy may preempt it (or it is not preemptible), and as its
non-preemptible copy otherwise.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from test_fairshare import tenant_snapshots

from schedulearn.core import ClusterView, create
from schedulearn.core.fairshare_book import ShareBook
from schedulearn.core.fairshare_fill import still_ahead
from schedulearn.core.fairshare_pass import SharePass
from schedulearn.core.fairshare_state import LEND_FOR
from schedulearn.core.views import JobView, rebuild


def _by_rule(p: SharePass, pending: tuple[JobView, ...]) -> list[JobView]:
    brief = any(p.brief(j) for j in pending)
    stranded = p.stranded_waits(pending)
    return [
        j if not j.preemptible or p.may_preempt(j, brief, stranded) else p.pinned_copy(j)
        for j in p.running.values()
        if j.id not in p.decided
    ]


@pytest.mark.parametrize("stopping", [False, True])
@pytest.mark.parametrize("later", [0.0, 450.0])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=tenant_snapshots())
def test_the_turn_shows_what_may_preempt_allows(
    later: float, stopping: bool, snapshot: tuple[ClusterView, float]
) -> None:
    view, min_run = snapshot
    book = ShareBook()
    view = book.named(view)
    running = view.running
    if stopping:  # every third job being stopped, as a live host shows them
        running = tuple(rebuild(j, stopping=i % 3 == 0) for i, j in enumerate(running))
    view = ClusterView(
        view.now + later, view.nodes, view.pending, running, view.free_counts,
        view.goodput, view.tenancy,
    )  # fmt: skip
    assert view.tenancy is not None
    p = SharePass(create("tiresias"), min_run, view, view.tenancy, {}, book)
    assert list(p.sub_view(view.pending, turn=True).running) == _by_rule(p, view.pending)
    p.reclaim()  # the book moves, some jobs are decided on
    got = p.sub_view(p.waiting(), turn=True).running
    assert list(got) == _by_rule(p, p.waiting())
    assert all(a is b for a, b in zip(got, _by_rule(p, p.waiting()), strict=True))


def _lends_afresh(p: SharePass, name: str, fitting: int) -> bool:
    """`PassState.lends` computed from the book as it is now, nothing kept."""
    busy = {q.name: q.fitting for q in p.book.values()}
    busy[name] = fitting
    return still_ahead(
        name,
        p.book.values(),
        p.view.total_gpus,
        p.tenancy.counted,
        busy,
        p.tenancy.half_life,
        LEND_FOR * p.min_run,
    ) if p.min_run > 0 else True  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=tenant_snapshots())
def test_what_lends_keeps_follows_the_book_as_the_pass_moves_it(
    snapshot: tuple[ClusterView, float],
) -> None:
    # `lends` keeps its answers while the book stays as it is: asked before
    # and after a reclaim and a turn have started and stopped jobs, it must
    # answer what a fresh computation on the book of the moment answers.
    view, min_run = snapshot
    book = ShareBook()
    view = book.named(view)
    assert view.tenancy is not None
    p = SharePass(create("tiresias"), min_run, view, view.tenancy, {}, book)

    def check() -> None:
        for s in list(p.book.values()):
            for fitting in range(max(0, s.fitting - 3), s.fitting + 1):
                assert p.lends(s, fitting) == _lends_afresh(p, s.name, fitting)

    check()
    p.reclaim()
    check()
    p.need = {}
    p._turn({s.name for s in p.book.values() if s.pending > 0}, borrow=True)
    check()
