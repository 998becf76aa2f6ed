"""The scheduler's kept pending views carry each owner's current unix account.

`snapshot.PendingCache` keeps views between passes and attaches accounts
(`JobView.account`, read from the user records every pass) to the views
it builds; the others keep theirs while the records stay the same. These
tests change the records between passes and check every view against
them, on SQLite (and PostgreSQL with SCHEDULEARN_TEST_POSTGRES=1).
"""

from __future__ import annotations

from sqlmodel import Session

from schedulearn.core.capabilities import NO_ACCOUNT
from schedulearn.protocol import JobSpec
from schedulearn.server.auth import Caller, Role
from schedulearn.server.models import User
from schedulearn.server.services import jobs, snapshot


def submit(session: Session, user: str, n: int = 1) -> None:
    spec = JobSpec(command=["true"], gpus=1)
    results = jobs.submit(session, [(spec, Caller(user, Role.USER))] * n, 100.0)
    assert all(isinstance(r, jobs.Submitted) for r in results), results


def set_account(session: Session, user: str, account: str | None) -> None:
    row = session.get(User, user) or User(name=user, created_at=0.0)
    row.unix_account = account
    session.add(row)
    session.commit()


def accounts(session: Session, cache: snapshot.PendingCache) -> list[tuple[str, str | None]]:
    """(owner, account) of each pending view, after one pass's load."""
    return [(v.user, v.account) for v in cache.load(session, snapshot.AccountBook(session))]


def test_a_changed_account_reaches_every_kept_view(session: Session) -> None:
    set_account(session, "ann", "a1")
    submit(session, "ann", 2)
    submit(session, "bob")
    cache = snapshot.PendingCache()
    assert accounts(session, cache) == [("ann", "a1"), ("ann", "a1"), ("bob", NO_ACCOUNT)]

    set_account(session, "ann", "a2")
    set_account(session, "bob", None)  # a record without an account: the user's name
    assert accounts(session, cache) == [("ann", "a2"), ("ann", "a2"), ("bob", "bob")]


def test_views_built_with_the_same_accounts_get_them_too(session: Session) -> None:
    set_account(session, "ann", "a1")
    submit(session, "ann")
    cache = snapshot.PendingCache()
    assert accounts(session, cache) == [("ann", "a1")]
    submit(session, "ann")
    assert accounts(session, cache) == [("ann", "a1"), ("ann", "a1")]


def test_views_built_without_a_book_are_attached_at_the_next_pass_with_one(
    session: Session,
) -> None:
    set_account(session, "ann", "a1")
    submit(session, "ann")
    cache = snapshot.PendingCache()
    assert accounts(session, cache) == [("ann", "a1")]
    submit(session, "ann")
    unattached = cache.load(session)
    assert [v.account for v in unattached][1] != "a1"  # the test's premise
    assert accounts(session, cache) == [("ann", "a1"), ("ann", "a1")]
