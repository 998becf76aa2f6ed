"""The Queue page and `show` list the queue in the order the policy in force walks it.

A real SQLite database migrated like the server's: one node with one free
GPU and a queue whose jobs each policy ranks differently. The page's rows,
`show`'s positions and the job the policy starts must agree, for every
registered policy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from schedulearn.core import Start, available, create
from schedulearn.server import db
from schedulearn.server.models import Gpu, Job, Node, Setting
from schedulearn.server.services import jobs, snapshot
from schedulearn.server.web import overview

NOW = 10_000.0
SPECS = [*available(), "fifo:backfill=true", "edf:preempt=true", "tiresias:threshold=100"]


@pytest.fixture
def database(tmp_path: Path) -> db.Database:
    database = db.Database(f"sqlite:///{tmp_path / 'q.db'}")
    db.migrate(database.engine)
    return database


def _seed(database: db.Database, spec: str) -> None:
    with database.session() as session:
        session.add(Node(name="n1", registered_at=0.0, last_seen=NOW))
        session.add(Gpu(node="n1", index=0, uuid="n1-gpu0"))
        # Oldest first; estimates, deadlines and service pull the policies apart.
        queue = [
            (1, 100.0, 100.0, 5000.0, None, 0.0),  # oldest, long, no deadline
            (2, 200.0, 9000.0, 900.0, NOW + 4000, 300.0),  # suspended late, served 300 s
            (3, 300.0, 300.0, 60.0, NOW + 9000, 0.0),  # shortest
            (4, 400.0, 400.0, None, NOW + 100, 0.0),  # earliest deadline, no estimate
        ]
        for job_id, submitted, queued, estimate, deadline, served in queue:
            session.add(
                Job(
                    id=job_id,
                    name=f"j{job_id}",
                    user="u",
                    command=["x"],
                    gpus=1,
                    submitted_at=submitted,
                    queued_at=queued,
                    estimated_duration=estimate,
                    deadline=deadline,
                    service_seconds=served,
                    attained_gpu_seconds=served,
                    preemptible=True,
                )
            )
        session.add(Setting(key="policy", value=spec))
        session.commit()


@pytest.mark.parametrize("spec", SPECS)
def test_the_queue_page_and_show_follow_the_order_decide_walks(
    database: db.Database, spec: str
) -> None:
    _seed(database, spec)
    with database.session() as session:
        # The default is not what is in force: the stored spec must win.
        page = overview.queue_page(session, "round-robin", NOW)
        shown = [row.job.id for row in page.rows]
        positions = {
            job_id: jobs.show(session, job_id, "round-robin", NOW).queue_position
            for job_id in shown
        }
        view = snapshot.build(session, NOW).view
    assert page.policy == spec
    assert sorted(shown) == [1, 2, 3, 4]
    assert positions == {job_id: i + 1 for i, job_id in enumerate(shown)}
    policy = create(spec)
    assert page.rule == policy.order(view).rule and page.exact == policy.order(view).exact
    started = [d.job_id for d in policy.decide(view) if isinstance(d, Start)]
    assert len(started) == 1  # one free GPU
    if page.exact:
        assert started[0] == shown[0]


def test_under_srtf_the_shortest_job_is_first_and_the_oldest_has_jobs_ahead(
    database: db.Database,
) -> None:
    _seed(database, "srtf")
    with database.session() as session:
        shortest = jobs.show(session, 3, "fifo", NOW)
        oldest = jobs.show(session, 1, "fifo", NOW)
    # Arrival order would put job 1 first and job 3 third.
    assert shortest.queue_position == 1
    assert shortest.waiting_reason == "resources are free; it starts on the next scheduling pass"
    assert oldest.queue_position == 3
    assert oldest.waiting_reason == (
        "resources are free, but 2 jobs ahead wait first (policy order)"
    )


def test_a_policy_without_a_fixed_order_claims_no_jobs_ahead(database: db.Database) -> None:
    _seed(database, "tetris")
    with database.session() as session:
        page = overview.queue_page(session, "fifo", NOW)
    assert not page.exact and page.rule.startswith("no fixed order")
    assert all("ahead" not in row.reason for row in page.rows)
    assert {row.reason for row in page.rows} == {
        "resources are free; the policy picks which waiting job starts first"
    }


def test_a_stored_spec_that_no_longer_builds_is_shown_as_fifo(database: db.Database) -> None:
    # The scheduler runs fifo then; the page says so rather than failing.
    _seed(database, "retired-policy")
    with database.session() as session:
        page = overview.queue_page(session, "fifo", NOW)
        view = snapshot.build(session, NOW).view
    assert page.policy == "retired-policy"
    assert [row.job.id for row in page.rows] == [1, 3, 4, 2]  # arrival (queue time) order
    assert page.rule == create("fifo").order(view).rule
