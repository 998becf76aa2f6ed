"""Tokens: who is calling, and what they may do.

A token is a random string shown once; only its SHA-256 is stored (the
`token` table, written by `services.tokens`). Roles: `admin` (everything,
including users, tokens and the policy), `user` (submit within their
priority range, cancel their own jobs, list and revoke their own tokens)
and `agent` (the `/api/v1/agent` routes).

A token works while it is not revoked, not expired, and its user (if it
has a record) is not disabled: `check` is that one rule, used by the API,
the web sessions and `schedulearn up`. Because every request needs it,
`TokenCache` keeps checked tokens in memory, but only for
`auth_cache_seconds` and never past the token's expiry; the services that
revoke a token or disable a user clear this replica's cache at once, and
other replicas ask the database again within that time.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from sqlalchemy import update
from sqlmodel import Session, col, select

from schedulearn.server.models import Token, User

# `last_used_at` is written at most this often per token (a write per request would
# cost more than the request).
LAST_USED_GRANULARITY = 60.0


class Role(StrEnum):
    ADMIN = "admin"
    USER = "user"
    AGENT = "agent"


@dataclass(frozen=True, slots=True)
class PriorityRange:
    """The priorities a user may give their jobs, both ends included."""

    low: int
    high: int

    def allows(self, priority: int) -> bool:
        return self.low <= priority <= self.high

    def text(self) -> str:
        return f"{self.low}..{self.high}"


@dataclass(frozen=True, slots=True)
class Caller:
    user: str
    role: Role
    token_id: int | None = None
    # None: no bound (admins, and callers made in-process by the server itself).
    priority: PriorityRange | None = None

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(role: Role) -> str:
    return f"sl{role.value[:2]}_{secrets.token_urlsafe(24)}"


def priority_range(user: User | None, default: PriorityRange) -> PriorityRange:
    """A user's range: the server's, with their own upper end when their record sets one."""
    if user is None or user.priority_max is None:
        return default
    return PriorityRange(min(default.low, user.priority_max), user.priority_max)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a token does not work, said so its holder knows what to do."""

    reason: str


UNKNOWN = Refusal("unknown token; ask an admin for one (schedulearn token create --user NAME)")


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def check(
    session: Session, token: Token, user: User | None, now: float, default: PriorityRange
) -> Caller | Refusal:
    """The caller a stored token stands for, or why it no longer works."""
    if token.revoked_at is not None:
        return Refusal(f"this token was revoked at {_utc(token.revoked_at)}; ask for a new one")
    if token.expires_at is not None and token.expires_at <= now:
        return Refusal(f"this token expired at {_utc(token.expires_at)}; ask for a new one")
    if user is not None and user.disabled_at is not None:
        return Refusal(f"user {user.name} is disabled; ask an admin")
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_GRANULARITY:
        session.execute(update(Token).where(col(Token.id) == token.id).values(last_used_at=now))
        session.commit()
    role = Role(token.role)
    bounds = None if role is Role.ADMIN else priority_range(user, default)
    return Caller(token.user, role, token.id, bounds)


def lookup(
    session: Session, digest: str, now: float, default: PriorityRange
) -> tuple[Caller, float | None] | Refusal:
    """The caller of a token hash and when the token expires, or why it does not work."""
    row = session.exec(
        select(Token, User)
        .join(User, col(User.name) == Token.user, isouter=True)
        .where(Token.hash == digest)
    ).first()
    if row is None:
        return UNKNOWN
    token, user = row
    caller = check(session, token, user, now, default)
    return caller if isinstance(caller, Refusal) else (caller, token.expires_at)


@dataclass(frozen=True, slots=True)
class _Entry:
    caller: Caller
    expires_at: float | None
    checked_at: float


class TokenCache:
    """Token hash -> caller, for `ttl` seconds and never past the token's expiry."""

    def __init__(self, ttl: float, default: PriorityRange) -> None:
        self.ttl = ttl
        self.default = default
        self._known: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        # Bumped by `forget`: a check that began before a revocation is not kept.
        self._generation = 0
        # Checks under way, by hash (event loop only): requests that miss
        # together (every client when an entry expires) share one.
        self.loading: dict[str, asyncio.Task[Caller | Refusal]] = {}

    def cached(self, token: str, now: float) -> tuple[str, Caller | None]:
        digest = hash_token(token)
        entry = self._known.get(digest)
        if entry is None:
            return digest, None
        stale = now - entry.checked_at >= self.ttl
        if stale or (entry.expires_at is not None and entry.expires_at <= now):
            with self._lock:
                self._known.pop(digest, None)
            return digest, None
        return digest, entry.caller

    def load(self, session: Session, digest: str, now: float) -> Caller | Refusal:
        """Check a token hash in the database (on a miss), and remember a working one."""
        generation = self._generation
        found = lookup(session, digest, now, self.default)
        if isinstance(found, Refusal):
            with self._lock:
                self._known.pop(digest, None)
            return found
        caller, expires_at = found
        if self.ttl > 0:
            with self._lock:
                if generation == self._generation:
                    self._known[digest] = _Entry(caller, expires_at, now)
        return caller

    def forget(self) -> None:
        """Drop every cached token: a token was revoked or a user changed."""
        with self._lock:
            self._generation += 1
            self._known.clear()
