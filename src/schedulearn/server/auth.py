"""Tokens: who is calling, and what they may do.

Owns the `token` table. A token is a random string shown once; only its
SHA-256 is stored. Roles: `admin` (everything, including the policy and
new tokens), `user` (submit, and cancel their own jobs) and `agent` (the
`/api/v1/agent` routes). Lookups are cached in memory because every
request needs one; a token is never changed, only added.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from enum import StrEnum

from sqlmodel import Session, select

from schedulearn.server.models import Token


class Role(StrEnum):
    ADMIN = "admin"
    USER = "user"
    AGENT = "agent"


@dataclass(frozen=True, slots=True)
class Caller:
    user: str
    role: Role

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(role: Role) -> str:
    return f"sl{role.value[:2]}_{secrets.token_urlsafe(24)}"


def store_token(session: Session, token: str, user: str, role: Role, now: float) -> None:
    """Store a token's hash (idempotent for a token already stored)."""
    digest = hash_token(token)
    if session.get(Token, digest) is None:
        session.add(Token(hash=digest, user=user, role=role.value, created_at=now))
        session.commit()


def create_token(session: Session, user: str, role: Role, now: float) -> str:
    token = new_token(role)
    store_token(session, token, user, role, now)
    return token


def has_role(session: Session, role: Role) -> bool:
    return (
        session.exec(select(Token.hash).where(Token.role == role.value).limit(1)).first()
        is not None
    )


class TokenCache:
    """Token hash -> caller, filled from the database on a miss."""

    def __init__(self) -> None:
        self._known: dict[str, Caller] = {}

    def cached(self, token: str) -> tuple[str, Caller | None]:
        digest = hash_token(token)
        return digest, self._known.get(digest)

    def load(self, session: Session, digest: str) -> Caller | None:
        row = session.get(Token, digest)
        if row is None:
            return None
        caller = Caller(row.user, Role(row.role))
        self._known[digest] = caller
        return caller
