"""The policy in force: stored in the database, validated against the registry.

Owns the `setting` row `policy`. A switch takes effect from the next
scheduling pass: the scheduler loop compares the stored spec with the
one its policy object was built from and rebuilds on a change.
"""

from __future__ import annotations

from sqlmodel import Session

from schedulearn.core import Policy, UnknownPolicyError, available, create
from schedulearn.protocol import PolicyPublic
from schedulearn.server.errors import BadRequest
from schedulearn.server.models import Setting

KEY = "policy"


def current_spec(session: Session, default: str) -> str:
    row = session.get(Setting, KEY)
    return row.value if row is not None else default


def build(spec: str) -> Policy:
    """The policy object for `spec`; BadRequest (listing valid names) if invalid."""
    try:
        return create(spec)
    except (UnknownPolicyError, TypeError, ValueError) as exc:
        raise BadRequest(str(exc)) from None


def public(spec: str) -> PolicyPublic:
    policy = build(spec)
    return PolicyPublic(
        spec=spec, name=policy.name, tick_seconds=policy.tick_seconds, available=available()
    )


def get(session: Session, default: str) -> PolicyPublic:
    return public(current_spec(session, default))


def set_spec(session: Session, spec: str) -> PolicyPublic:
    spec = spec.strip()
    result = public(spec)  # validate before storing
    row = session.get(Setting, KEY)
    if row is None:
        row = Setting(key=KEY, value=spec)
    row.value = spec
    session.add(row)
    session.commit()
    return result
