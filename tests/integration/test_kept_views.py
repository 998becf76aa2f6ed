"""The scheduler's kept views (`services.live_views`) against a fresh read.

The scheduler keeps the running jobs and the nodes as views between passes
and builds a view again only for a row that changed (issue 36: rebuilding
them every pass was most of a live pass at 1,000 nodes). Here, after each
kind of change the live system makes between passes, a snapshot built from
the kept views must equal one read afresh, and only the changed rows are
built again. Real app, real database (both backends); the scheduler runs
only when the test calls `schedule()` (`stepped.py`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from stepped import Stepped, stepped_app
from wire_agent import WireAgent

from schedulearn.server.services import live_views, snapshot
from schedulearn.settings import ServerSettings


@pytest.fixture
def app(settings: ServerSettings) -> Iterator[Stepped]:
    with stepped_app(settings) as stepped:
        yield stepped


def same_as_fresh(app: Stepped, kept: live_views.Kept) -> tuple[int, int]:
    """Assert the kept snapshot equals a fresh one; the views built for it
    (running jobs, nodes)."""
    now = app.clock.now()
    before = (kept.running.built, kept.nodes.built)
    db = app.api.state.db
    fresh = db.call(snapshot.build, now)
    mine = db.call(snapshot.build, now, kept)
    assert mine.view == fresh.view
    assert (mine.holders, mine.draining) == (fresh.holders, fresh.draining)
    return kept.running.built - before[0], kept.nodes.built - before[1]


def test_the_kept_views_follow_every_change_and_rebuild_only_what_changed(app: Stepped) -> None:
    n1, n2 = WireAgent(app.api, "n1", gpus=2), WireAgent(app.api, "n2", gpus=2)
    n1.register()
    n2.register()
    kept = live_views.Kept()
    assert same_as_fresh(app, kept) == (0, 2)  # the first read builds every node
    assert same_as_fresh(app, kept) == (0, 0)  # nothing changed: nothing built

    a, b = app.submit(gpus=1), app.submit(gpus=1)
    app.schedule()
    on = {s.job_id: (node, s.attempt) for node in (n1, n2) for s in node.work(wait=0).starts}
    assert set(on) == {a, b}
    assert same_as_fresh(app, kept) == (2, 0)  # two jobs hold GPUs now
    assert same_as_fresh(app, kept) == (0, 0)

    # Reported started (its row gains `started_at` and a state): built again.
    agent, attempt = on[a]
    agent.start(a, attempt)
    assert same_as_fresh(app, kept) == (1, 0)

    # A running job's priority changed by its owner: built again.
    r = app.api.client.patch(f"/api/v1/jobs/{b}", json={"priority": 5}, headers=app.api.admin)
    assert r.status_code == 200, r.text
    assert same_as_fresh(app, kept) == (1, 0)

    # A node drained by an admin: only that node is built again.
    r = app.api.post("/api/v1/nodes/n2/drain", params={"reason": "fan"})
    assert r.status_code == 200, r.text
    assert same_as_fresh(app, kept) == (0, 1)

    # A job ends: it leaves the running views, and its GPU is free again.
    agent.exit(a, attempt, 0)
    assert same_as_fresh(app, kept) == (0, 0)
    assert len(app.api.state.db.call(snapshot.build, app.clock.now(), kept).view.running) == 1
