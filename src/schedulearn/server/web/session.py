"""Sign-in sessions and CSRF tokens of the web pages.

Owns the `sl_session` cookie and the page secret. A user signs in once
with an API token; the cookie then carries the token's SHA-256 (never
the token itself), a per-session CSRF token and an expiry, signed with
HMAC-SHA256. Nothing is stored per session on the server, so any API
replica can serve any page; the secret is kept in the `setting` table
(row `web_secret`, made at the first sign-in), so it survives restarts
and is shared by replicas on PostgreSQL.

Forms carry the CSRF token in a hidden field and htmx requests in the
`X-CSRF-Token` header; a request that changes something without the
token of its own session is refused. The sign-in form, which has no
session yet, uses a double-submit cookie (`sl_login`) instead.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from schedulearn.server.models import Setting

SESSION_COOKIE = "sl_session"
LOGIN_COOKIE = "sl_login"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
SESSION_SECONDS = 7 * 24 * 3600.0
SECRET_KEY = "web_secret"


@dataclass(frozen=True, slots=True)
class WebSession:
    """What a signed-in browser carries: whose token, its CSRF token, when it ends."""

    token_hash: str
    csrf: str
    expires: float


def load_secret(session: Session) -> bytes:
    """The page secret; made (and stored) on first use."""
    row = session.get(Setting, SECRET_KEY)
    if row is not None:
        return bytes.fromhex(row.value)
    value = secrets.token_hex(32)
    session.add(Setting(key=SECRET_KEY, value=value))
    try:
        session.commit()
    except IntegrityError:
        # Another replica (or request) made it first: use theirs.
        session.rollback()
        row = session.get(Setting, SECRET_KEY)
        assert row is not None
        return bytes.fromhex(row.value)
    return bytes.fromhex(value)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: bytes, payload: str) -> str:
    return _b64(hmac.new(secret, payload.encode(), hashlib.sha256).digest())


def new_session(token_hash: str, now: float) -> WebSession:
    return WebSession(token_hash, secrets.token_urlsafe(24), now + SESSION_SECONDS)


def encode(ws: WebSession, secret: bytes) -> str:
    payload = _b64(json.dumps([ws.token_hash, ws.csrf, ws.expires]).encode())
    return f"{payload}.{_sign(secret, payload)}"


def decode(value: str | None, secret: bytes, now: float) -> WebSession | None:
    """The session in a cookie, or None if it is missing, forged, malformed or expired."""
    if not value or "." not in value:
        return None
    payload, signature = value.rsplit(".", 1)
    if not hmac.compare_digest(signature, _sign(secret, payload)):
        return None
    try:
        token_hash, csrf, expires = json.loads(_unb64(payload))
    except (ValueError, TypeError):
        return None
    if not isinstance(expires, int | float) or expires <= now:
        return None
    return WebSession(str(token_hash), str(csrf), float(expires))


def same_token(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a submitted CSRF token with the expected one."""
    return bool(given) and hmac.compare_digest(str(given), expected)


def new_login_nonce() -> str:
    return secrets.token_urlsafe(24)
