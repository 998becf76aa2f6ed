"""Users as records: add, list, change, disable; who their jobs run as; their priority range.

Owns the `app_user` table. A user's unix account on the GPU hosts is their
user name unless the record names another (`--unix-account`); their jobs
never run as root unless an admin allowed it (`--allow-root`). A disabled
user's tokens and web sessions stop working at once (`auth.check` reads
the record; their sessions are deleted here), so they can neither submit
nor look. Priorities: a user gives a job a priority within the server's
range (`user_priority_min..user_priority_max`), whose upper end their record
may override; admins have no bound.
"""

from __future__ import annotations

from sqlalchemy import bindparam, delete
from sqlmodel import Session, col, select

from schedulearn.protocol import RunAs, UserCreate, UserList, UserPublic, UserUpdate
from schedulearn.server.auth import Caller, PriorityRange, priority_range
from schedulearn.server.errors import BadRequest, Conflict, NotFound
from schedulearn.server.models import Token, User, WebSession


def find(session: Session, name: str) -> User | None:
    return session.get(User, name)


def ensure(session: Session, name: str, now: float) -> User:
    """The user's record, made with the defaults if they have none (not committed)."""
    row = session.get(User, name)
    if row is None:
        row = User(name=name, created_at=now)
        session.add(row)
        session.flush()
    return row


def public(row: User, default: PriorityRange) -> UserPublic:
    bounds = priority_range(row, default)
    return UserPublic(
        name=row.name,
        unix_account=row.unix_account or row.name,
        allow_root=row.allow_root,
        priority_min=bounds.low,
        priority_max=bounds.high,
        priority_max_own=row.priority_max is not None,
        created_at=row.created_at,
        disabled_at=row.disabled_at,
    )


def _check_root(name: str, account: str, allow_root: bool) -> None:
    if account == "root" and not allow_root:
        raise BadRequest(
            f"user {name} would run jobs as root; pass --allow-root too if that is meant"
        )


def add(session: Session, body: UserCreate, now: float, default: PriorityRange) -> UserPublic:
    if session.get(User, body.name) is not None:
        raise Conflict(
            f"user {body.name} exists; change them with `schedulearn user set {body.name} ...`"
        )
    _check_root(body.name, body.unix_account or body.name, body.allow_root)
    row = User(
        name=body.name,
        unix_account=body.unix_account,
        allow_root=body.allow_root,
        priority_max=body.priority_max,
        created_at=now,
    )
    session.add(row)
    session.commit()
    return public(row, default)


def list_users(session: Session, default: PriorityRange) -> UserList:
    rows = session.exec(select(User).order_by(col(User.name))).all()
    return UserList(items=[public(r, default) for r in rows])


def update(
    session: Session,
    caller: Caller,
    name: str,
    body: UserUpdate,
    now: float,
    default: PriorityRange,
) -> UserPublic:
    """Change a user's record (admin); disabling ends their web sessions at once."""
    row = session.get(User, name)
    if row is None:
        raise NotFound(f"no user {name}; add them with `schedulearn user add {name}`")
    if body.disabled and name == caller.user:
        raise BadRequest("you cannot disable yourself; ask another admin")
    if body.unix_account is not None:
        row.unix_account = body.unix_account
    if body.allow_root is not None:
        row.allow_root = body.allow_root
    if body.clear_priority_max:
        row.priority_max = None
    elif body.priority_max is not None:
        row.priority_max = body.priority_max
    if body.disabled is True and row.disabled_at is None:
        row.disabled_at = now
    elif body.disabled is False:
        row.disabled_at = None
    _check_root(name, row.unix_account or name, row.allow_root)
    session.add(row)
    if row.disabled_at is not None:
        tokens = select(Token.id).where(Token.user == name)
        session.execute(delete(WebSession).where(col(WebSession.token_id).in_(tokens)))
    session.commit()
    return public(row, default)


def unix_account_of(session: Session, user_name: str) -> RunAs | None:
    """Who `user_name`'s jobs run as on the GPU hosts, or None if they must not run.

    None: the user has no record, or is disabled. An agent started as root
    must then refuse the job (a non-root agent runs every job as itself).
    The account is the record's `unix_account`, else the user name; root
    only comes with `allow_root`.
    """
    row = session.get(User, user_name)
    if row is None or row.disabled_at is not None:
        return None
    return _run_as(row.name, row.unix_account, row.allow_root)


def unix_accounts(session: Session, names: set[str] | None = None) -> dict[str, RunAs]:
    """`unix_account_of` for every user at once, or for those in `names` (one
    query; the scheduler's pass needs every job owner's, a work handout its
    batch's): users absent here get None."""
    conn = session.connection()  # plain rows: every pass and every handout reads them
    if names is None:
        rows = conn.execute(_ACCOUNTS)
    else:
        rows = conn.execute(_ACCOUNTS_OF, {"names": list(names)})
    return {name: _run_as(name, account, allow_root) for name, account, allow_root in rows}


# Built once: see `unix_accounts`.
_ACCOUNTS = select(col(User.name), col(User.unix_account), col(User.allow_root)).where(
    col(User.disabled_at).is_(None)
)
_ACCOUNTS_OF = _ACCOUNTS.where(col(User.name).in_(bindparam("names", expanding=True)))


def _run_as(name: str, unix_account: str | None, allow_root: bool) -> RunAs:
    return RunAs(account=unix_account or name, allow_root=allow_root)


def check_priority(priority: int, caller: Caller) -> None:
    """Refuse (400) a priority outside the caller's range; admins have none."""
    bounds = caller.priority
    if bounds is None or bounds.allows(priority):
        return
    raise BadRequest(
        f"priority {priority} is outside the range you may use ({bounds.text()}); "
        "pick one within it, or ask an admin to raise your limit "
        f"(schedulearn user set {caller.user} --priority-max N)"
    )
