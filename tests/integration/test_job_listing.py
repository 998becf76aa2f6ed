"""A job listing's pages under filters on several states, against a plain sort.

`services.jobs.list_jobs` reads a page under several states from each
state's first ids, sorting only those (`services.job_listing`). These tests
list jobs in mixed states, by owner and by state sets, in both orders and
at every offset, and compare each page and total with the same listing
done in Python, on SQLite (and PostgreSQL with SCHEDULEARN_TEST_POSTGRES=1).
"""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import update
from sqlmodel import Session, col

from schedulearn.protocol import JobSpec, JobState
from schedulearn.server.auth import Caller, Role
from schedulearn.server.models import Job
from schedulearn.server.services import jobs

# Each job's state and owner, by position: runs of one state of uneven
# length, so that one state's ids are not spread evenly over the others'.
STATES = [JobState.SUCCEEDED] * 5 + [JobState.FAILED, JobState.PENDING] * 3 + [JobState.CANCELLED]
LAYOUT = [(STATES[i * 7 % len(STATES)], "ann" if i % 3 else "bob") for i in range(30)]
ADMIN = Caller("admin", Role.ADMIN)


@pytest.fixture
def listed(session: Session) -> dict[int, tuple[JobState, str]]:
    """The jobs of `LAYOUT`, submitted, then moved to their states: id -> (state, owner)."""
    made: dict[int, tuple[JobState, str]] = {}
    for state, owner in LAYOUT:
        spec = JobSpec(command=["true"], gpus=1)
        [result] = jobs.submit(session, [(spec, Caller(owner, Role.USER))], 100.0)
        assert isinstance(result, jobs.Submitted), result
        job_id = result.jobs[0].id
        assert job_id is not None
        session.execute(update(Job).where(col(Job.id) == job_id).values(state=state))
        made[job_id] = (state, owner)
    session.commit()
    return made


FILTERS = [
    [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED],
    [JobState.PENDING, JobState.CANCELLED],
    [JobState.FAILED, JobState.FAILED],  # named twice: listed once
    [JobState.RUNNING, JobState.FAILED],  # one state with no job
    [JobState.SUCCEEDED],
    [],
]


@pytest.mark.parametrize("states", FILTERS, ids=lambda s: "+".join(s) or "any")
def test_every_page_is_the_plain_sorts_page(
    session: Session, listed: dict[int, tuple[JobState, str]], states: list[JobState]
) -> None:
    for user, newest_first, limit in itertools.product([None, "ann"], [False, True], [1, 4]):
        expected = sorted(
            (
                i
                for i, (s, o) in listed.items()
                if (not states or s in states) and user in (None, o)
            ),
            reverse=newest_first,
        )
        assert expected, "the layout gives every filter jobs"
        for offset in range(0, len(expected) + limit, limit):
            page = jobs.list_jobs(session, ADMIN, states, user, None, offset, limit, newest_first)
            where = f"states {states}, user {user}, newest first {newest_first}, offset {offset}"
            assert [j.id for j in page.items] == expected[offset : offset + limit], where
            assert page.total == len(expected), where
