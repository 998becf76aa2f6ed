"""Web sign-in by user name and password: set a password, check one.

Owns the password columns of `app_user` (`password_hash`, `password_role`,
`password_set_at`). A password is kept only as a salted scrypt hash
(`hashlib.scrypt`, standard library), written `scrypt$n$r$p$salt$hash` so
the cost can be raised later while older hashes still check. Hashes are
compared in constant time, and a name with no password costs the same
scrypt as one with a password, so neither the answer nor its time says
whether a user exists.

Who sets it: a user their own (with any of their tokens), an admin
anyone's. The role a sign-in gets is fixed when it is set: the role of
the token that set it when a user sets their own (an admin's own password
signs in as admin), `user` when an admin sets someone else's. A password
never gives more than the token that set it.

A sign-in makes a token for that browser session alone (named `web
sign-in`, expiring with the session, its secret never shown), so the
session is checked by `auth.check` like any other: disabling the user or
revoking that token (`token list` shows it) ends the session at once, and
setting a new password ends every session the old one signed in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

from sqlalchemy import delete, update
from sqlmodel import Session, col, select

from schedulearn.protocol import PasswordSetReply
from schedulearn.server.auth import Caller, Role
from schedulearn.server.errors import Forbidden, NotFound
from schedulearn.server.models import Token, User, WebSession
from schedulearn.server.services import tokens, users

# scrypt's cost: 16 MiB and a few tens of milliseconds per check (RFC 7914's
# interactive-login figures).
_N, _R, _P = 2**14, 8, 1
_SALT_BYTES = 16
_KEY_BYTES = 32
SESSION_TOKEN_NAME = "web sign-in"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 * n * r, dklen=_KEY_BYTES
    )


def hash_password(password: str, salt: bytes | None = None) -> str:
    """The stored form of a password: `scrypt$n$r$p$salt$hash`."""
    salt = salt if salt is not None else os.urandom(_SALT_BYTES)
    digest = _scrypt(password, salt, _N, _R, _P)
    return f"scrypt${_N}${_R}${_P}${_b64(salt)}${_b64(digest)}"


# What a name without a password is checked against, so that it costs the same.
_NOBODY = hash_password("", salt=b"\0" * _SALT_BYTES)


def verify(stored: str | None, password: str) -> bool:
    """Whether `password` is the one `stored` was made from (constant-time compare)."""
    kind, n, r, p, salt, digest = (stored or _NOBODY).split("$")
    if kind != "scrypt":
        return False
    given = _scrypt(password, _unb64(salt), int(n), int(r), int(p))
    return hmac.compare_digest(given, _unb64(digest)) and stored is not None


def set_password(
    session: Session, caller: Caller, name: str, password: str, now: float
) -> PasswordSetReply:
    """Set `name`'s password: their own, or anyone's as an admin."""
    if name != caller.user and not caller.is_admin:
        raise Forbidden(
            f"you may set only your own password ({caller.user}); an admin sets anyone's"
        )
    row = users.find(session, name)
    if row is None:
        if not caller.is_admin:
            row = users.ensure(session, name, now)  # their tokens work without a record
        else:
            raise NotFound(f"no user {name}; add them with `schedulearn user add {name}`")
    role = caller.role if name == caller.user else Role.USER
    row.password_hash = hash_password(password)
    row.password_role = role.value
    row.password_set_at = now
    session.add(row)
    _end_password_sessions(session, name, now)
    session.commit()
    return PasswordSetReply(user=name, role=role.value, set_at=now)


def _end_password_sessions(session: Session, name: str, now: float) -> None:
    """A new password signs out every browser the old one signed in (not committed)."""
    owned = select(WebSession.token_id).join(Token, col(Token.id) == col(WebSession.token_id))
    owned = owned.where(col(WebSession.own_token), Token.user == name)
    token_ids = list(session.exec(owned).all())
    if not token_ids:
        return
    session.execute(
        update(Token)
        .where(col(Token.id).in_(token_ids), col(Token.revoked_at).is_(None))
        .values(revoked_at=now)
    )
    session.execute(delete(WebSession).where(col(WebSession.token_id).in_(token_ids)))


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A password sign-in that worked: the token made for its session."""

    token_id: int
    user: str
    role: Role


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a sign-in did not work, as the person signing in may be told."""

    reason: str


WRONG = Refused("Wrong user name or password.")


def sign_in(
    session: Session, name: str, password: str, now: float, session_seconds: float
) -> SignedIn | Refused:
    """Check a user name and password; when they match, a token for the session.

    The same refusal, after the same work, for an unknown user, a user
    without a password and a wrong password.
    """
    row = session.get(User, name) if name else None
    stored = row.password_hash if row is not None else None
    if not verify(stored, password) or row is None:
        return WRONG
    if row.disabled_at is not None:
        # Said only to someone who knew the password.
        return Refused(f"User {name} is disabled; ask an admin.")
    role = Role(row.password_role or Role.USER.value)
    token, _secret = tokens.issue(
        session, name, role, now, name=SESSION_TOKEN_NAME, expires_at=now + session_seconds
    )
    assert token.id is not None
    return SignedIn(token.id, name, role)
