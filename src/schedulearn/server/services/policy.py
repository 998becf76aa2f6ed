"""The policy in force: stored in the database, validated against the registry.

Owns the `setting` row `policy`. A switch takes effect from the next
scheduling pass: the scheduler loop compares the stored spec with the
one its policy object was built from and rebuilds on a change.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlmodel import Session, col

from schedulearn.core import Policy, UnknownPolicyError, available, create
from schedulearn.core.registry import options_of, parse_spec
from schedulearn.protocol import PolicyPublic
from schedulearn.server.errors import BadRequest
from schedulearn.server.models import Setting

KEY = "policy"


# A plain read built once, not `session.get`: every scheduling pass asks, and
# the ORM's identity lookup (with its autoflush) cost more than the pass.
_CURRENT = select(col(Setting.value)).where(col(Setting.key) == KEY)


def current_spec(session: Session, default: str) -> str:
    value = session.connection().execute(_CURRENT).scalar()
    return value if value is not None else default


def build(spec: str, min_resize_age: float | None = None, **supplied: Any) -> Policy:
    """The policy object for `spec`; BadRequest (listing valid names) if invalid.

    `min_resize_age` (the server's `min_resize_age_seconds`) is the default
    `min_age` of a policy that resizes jobs, when the spec does not set one:
    the rule itself lives in the policy. `supplied` are other options the
    server provides itself (the live throughput profiles, see
    `services.profiles.policy_overrides`).
    """
    try:
        name, options = parse_spec(spec)
        defaults: dict[str, Any] = dict(supplied)
        if (
            min_resize_age is not None
            and "min_age" in options_of(name)
            and "min_age" not in options
        ):
            defaults["min_age"] = min_resize_age
        return create(spec, **defaults)
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
