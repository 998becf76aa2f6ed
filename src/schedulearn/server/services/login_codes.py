"""One-time web sign-in links (`schedulearn web-login`): make a code, use it once.

Owns the `web_login_code` table. The CLI, calling with a user's token, asks
for a code; the server keeps only the code's SHA-256, that token's id and
when the code ends (the `web_login_seconds` setting, 5 minutes by
default), and the CLI prints the server's
address with `/ui/login?code=...`. Opening the link and confirming signs
that browser in with the same token, as pasting the token would, without
the token leaving the terminal. A code is marked used by one conditional
UPDATE, so of two browsers racing with one link exactly one gets in; a
used, expired or unknown code is refused saying which. The token must
still work when the code is used (`auth.check`), so revoking it or
disabling its user also ends the links it asked for. Codes a day past
their end are swept when new ones are made.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from urllib.parse import quote

from sqlalchemy import delete, update
from sqlmodel import Session, col, select

from schedulearn.protocol import WebLoginLink
from schedulearn.server.auth import Caller, PriorityRange, Refusal, check
from schedulearn.server.errors import Forbidden
from schedulearn.server.models import Token, User, WebLoginCode
from schedulearn.server.services.passwords import Refused

LOGIN_PATH = "/ui/login"
_KEEP_USED_SECONDS = 86400.0
_AGAIN = "make a new one with `schedulearn web-login`"


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def create(session: Session, caller: Caller, now: float, seconds: float) -> WebLoginLink:
    """A new code that signs a browser in with the caller's token, once, for `seconds`."""
    if caller.token_id is None:
        raise Forbidden("only a user's or an admin's token can make a sign-in link")
    session.execute(
        delete(WebLoginCode).where(col(WebLoginCode.expires_at) <= now - _KEEP_USED_SECONDS)
    )
    code = secrets.token_urlsafe(24)
    expires_at = now + seconds
    session.add(
        WebLoginCode(
            code_hash=_digest(code), token_id=caller.token_id, created_at=now, expires_at=expires_at
        )
    )
    session.commit()
    return WebLoginLink(
        user=caller.user,
        role=caller.role.value,
        code=code,
        path=f"{LOGIN_PATH}?code={quote(code)}",
        expires_at=expires_at,
    )


def _why_not(row: WebLoginCode | None, now: float) -> Refused | None:
    """Why a code cannot be used now, or None when it can."""
    if row is None:
        return Refused(f"This sign-in link is not known; {_AGAIN}.")
    if row.used_at is not None:
        return Refused(f"This sign-in link was already used (each works once); {_AGAIN}.")
    if row.expires_at <= now:
        at = datetime.fromtimestamp(row.expires_at, UTC).strftime("%H:%M:%S UTC")
        return Refused(f"This sign-in link expired at {at}; {_AGAIN}.")
    return None


def _caller(
    session: Session, token_id: int, now: float, default: PriorityRange
) -> Caller | Refused:
    row = session.exec(
        select(Token, User)
        .join(User, col(User.name) == col(Token.user), isouter=True)
        .where(col(Token.id) == token_id)
    ).first()
    if row is None:
        return Refused(f"The token that made this link is gone; {_AGAIN}.")
    who = check(session, row[0], row[1], now, default)
    if isinstance(who, Refusal):
        return Refused(f"Cannot sign in: {who.reason}.")
    return who


def peek(session: Session, code: str, now: float, default: PriorityRange) -> Caller | Refused:
    """Who a code would sign in as, without using it (the confirmation page)."""
    row = session.get(WebLoginCode, _digest(code))
    refused = _why_not(row, now)
    if refused is not None or row is None:
        return refused or Refused(_AGAIN)
    return _caller(session, row.token_id, now, default)


def use(session: Session, code: str, now: float, default: PriorityRange) -> Caller | Refused:
    """Use a code (once): who it signs in as, or why not."""
    digest = _digest(code)
    taken = session.execute(
        update(WebLoginCode)
        .where(col(WebLoginCode.code_hash) == digest)
        .where(col(WebLoginCode.used_at).is_(None))
        .where(col(WebLoginCode.expires_at) > now)
        .values(used_at=now)
    )
    session.commit()
    row = session.get(WebLoginCode, digest)
    if taken.rowcount != 1 or row is None:  # type: ignore[attr-defined]  # CursorResult
        return _why_not(row, now) or Refused(_AGAIN)
    return _caller(session, row.token_id, now, default)
