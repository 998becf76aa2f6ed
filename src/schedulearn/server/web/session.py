"""Sign-in sessions and CSRF tokens of the web pages, kept on the server.

Owns the `web_session` table and the `sl_session` cookie. A user signs in
once, with a user name and password (`services.passwords`, which makes a
token for the session alone), a one-time link (`services.login_codes`,
the token of the CLI that made it) or by pasting an API token; the server
then stores a session row (the SHA-256
of a random session id, the token's id, a CSRF token and an expiry) and
the HttpOnly, SameSite cookie carries only the random id. Every page
request looks the row up with its token and user (`auth.check`), so
signing out (the row is deleted), revoking the token, the token expiring
or the user being disabled ends the session at once, on every replica.

Forms carry the CSRF token in a hidden field and htmx requests in the
`X-CSRF-Token` header; a request that changes something without the
token of its own session is refused. The sign-in form, which has no
session yet, uses a double-submit cookie (`sl_login`) instead.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import delete, update
from sqlmodel import Session, col, select

from schedulearn.server.auth import Caller, PriorityRange, Refusal, check
from schedulearn.server.models import Token, User, WebSession

SESSION_COOKIE = "sl_session"
LOGIN_COOKIE = "sl_login"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
SESSION_SECONDS = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Signed:
    """A live session: who it is and its CSRF token."""

    caller: Caller
    csrf: str


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def start(session: Session, token_id: int, now: float, own_token: bool = False) -> tuple[str, str]:
    """A new session for a signed-in token: (the cookie's value, the CSRF token).

    `own_token`: the token was made for this session (a password sign-in)
    and is revoked when it signs out."""
    # Sessions that ended by time are swept here, so the table does not grow.
    session.execute(delete(WebSession).where(col(WebSession.expires_at) <= now))
    session_id = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(24)
    session.add(
        WebSession(
            id_hash=_digest(session_id),
            token_id=token_id,
            csrf=csrf,
            created_at=now,
            expires_at=now + SESSION_SECONDS,
            own_token=own_token,
        )
    )
    session.commit()
    return session_id, csrf


def resolve(session: Session, session_id: str, now: float, default: PriorityRange) -> Signed | None:
    """The live session a cookie names, or None (unknown, signed out, expired, or its
    token revoked, expired or its user disabled)."""
    row = session.exec(
        select(WebSession, Token, User)
        .join(Token, col(Token.id) == col(WebSession.token_id))
        .join(User, col(User.name) == col(Token.user), isouter=True)
        .where(WebSession.id_hash == _digest(session_id))
    ).first()
    if row is None:
        return None
    web, token, user = row
    if web.expires_at <= now:
        return None
    caller = check(session, token, user, now, default)
    return None if isinstance(caller, Refusal) else Signed(caller, web.csrf)


def end(session: Session, session_id: str, now: float) -> None:
    """Sign out: the session stops working at once (and the token it owns, if any)."""
    row = session.get(WebSession, _digest(session_id))
    if row is None:
        return
    if row.own_token:
        session.execute(
            update(Token)
            .where(col(Token.id) == row.token_id, col(Token.revoked_at).is_(None))
            .values(revoked_at=now)
        )
    session.delete(row)
    session.commit()


def same_token(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a submitted CSRF token with the expected one."""
    return bool(given) and hmac.compare_digest(str(given), expected)


def new_login_nonce() -> str:
    return secrets.token_urlsafe(24)
