"""Tokens that end: make, list and revoke API tokens; the first tokens of a new server.

Owns the rows of the `token` table (whether a token works is `auth.check`).
Admins make tokens for anyone (`--user`, default themselves), with an
optional expiry and a label; a token for someone who has no user record
makes one with the defaults (`services.users.ensure`). Users list and
revoke their own tokens, admins anyone's. Revoking a token also ends the
web sessions signed in with it. A token's secret is shown once, when it
is made, and never again: listings carry its id and label only.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import delete
from sqlalchemy.engine import make_url
from sqlmodel import Session, col, select

from schedulearn.protocol import TokenCreate, TokenInfo, TokenList, TokenPublic, TokenState
from schedulearn.server.auth import Caller, Role, hash_token, new_token
from schedulearn.server.db import normalise_url
from schedulearn.server.errors import BadRequest, Forbidden, NotFound
from schedulearn.server.models import Token, WebSession
from schedulearn.server.services import users
from schedulearn.settings import ServerSettings, data_dir

FIRST_TOKENS = "first-tokens"
_SPAN = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_expiry(text: str, now: float) -> float:
    """`30d`, `12h`, `90m`, `8w` from now, or a UTC date / date-time, as a unix time."""
    span = _SPAN.match(text)
    if span:
        seconds = int(span.group(1)) * _UNIT_SECONDS[span.group(2)]
        if seconds <= 0:
            raise BadRequest(f"expires {text!r} is not in the future; give e.g. 30d")
        return now + seconds
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadRequest(
            f"expires {text!r} is neither a span (90m, 12h, 30d, 8w) nor a date "
            "(2027-01-31 or 2027-01-31T18:00, UTC)"
        ) from None
    at = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    if at <= now:
        raise BadRequest(f"expires {text!r} is in the past; give a later date or a span like 30d")
    return at


def issue(
    session: Session,
    user: str,
    role: Role,
    now: float,
    name: str = "",
    expires_at: float | None = None,
    secret: str | None = None,
) -> tuple[Token, str]:
    """Store a token (a new one, or `secret` if given and not stored yet); commit.

    A user or admin token gets its user a record if they have none.
    """
    secret = secret or new_token(role)
    digest = hash_token(secret)
    existing = session.exec(select(Token).where(Token.hash == digest)).first()
    if existing is not None:
        return existing, secret
    if role is not Role.AGENT:
        users.ensure(session, user, now)
    row = Token(
        hash=digest, user=user, role=role.value, name=name, created_at=now, expires_at=expires_at
    )
    session.add(row)
    session.commit()
    session.refresh(row)
    return row, secret


def create(session: Session, caller: Caller, body: TokenCreate, now: float) -> TokenPublic:
    """A new token (admin): for `body.user`, or the caller."""
    user = body.user or caller.user
    role = Role(body.role)
    expires_at = parse_expiry(body.expires, now) if body.expires else None
    record = users.find(session, user)
    if record is not None and record.disabled_at is not None and role is not Role.AGENT:
        raise BadRequest(
            f"user {user} is disabled; enable them first (schedulearn user enable {user})"
        )
    row, secret = issue(session, user, role, now, body.name, expires_at)
    assert row.id is not None
    return TokenPublic(
        id=row.id, user=user, role=role.value, name=row.name, expires_at=expires_at, token=secret
    )


def state_of(row: Token, now: float) -> TokenState:
    if row.revoked_at is not None:
        return TokenState.REVOKED
    if row.expires_at is not None and row.expires_at <= now:
        return TokenState.EXPIRED
    return TokenState.ACTIVE


def info(row: Token, now: float) -> TokenInfo:
    assert row.id is not None
    return TokenInfo(
        id=row.id,
        user=row.user,
        role=row.role,
        name=row.name,
        state=state_of(row, now),
        created_at=row.created_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )


def list_tokens(
    session: Session, caller: Caller, user: str | None, include_ended: bool, now: float
) -> TokenList:
    """Tokens, oldest first: a user's own, or (admin) everyone's or `user`'s."""
    if not caller.is_admin:
        if user is not None and user != caller.user:
            raise Forbidden("you may list only your own tokens; an admin lists anyone's")
        user = caller.user
    query = select(Token).order_by(col(Token.id))
    if user is not None:
        query = query.where(Token.user == user)
    if not caller.is_admin:
        query = query.where(Token.role != Role.AGENT.value)
    rows = session.exec(query).all()
    items = [info(r, now) for r in rows]
    if not include_ended:
        items = [i for i in items if i.state is TokenState.ACTIVE]
    return TokenList(items=items)


def revoke(session: Session, caller: Caller, token_id: int, now: float) -> TokenInfo:
    """End a token now, and the web sessions signed in with it (idempotent)."""
    row = session.get(Token, token_id)
    if row is None or (not caller.is_admin and row.user != caller.user):
        # Someone else's token reads as absent: ids of others' tokens are not disclosed.
        raise NotFound(f"no token {token_id} of yours; `schedulearn token list` shows their ids")
    if not caller.is_admin and row.role == Role.AGENT.value:
        raise Forbidden("an agent token is revoked by an admin")
    if row.revoked_at is None:
        row.revoked_at = now
        session.add(row)
    session.execute(delete(WebSession).where(col(WebSession.token_id) == token_id))
    session.commit()
    return info(row, now)


def has_working(session: Session, role: Role, now: float) -> bool:
    """Whether some token of this role still works (not revoked, not expired)."""
    query = (
        select(Token.id)
        .where(Token.role == role.value, col(Token.revoked_at).is_(None))
        .where((col(Token.expires_at).is_(None)) | (col(Token.expires_at) > now))
        .limit(1)
    )
    return session.exec(query).first() is not None


def first_tokens_path(settings: ServerSettings) -> Path:
    """`token_file`, else `first-tokens` beside the SQLite file, else in the data directory."""
    if settings.token_file:
        return Path(settings.token_file).expanduser()
    url = make_url(normalise_url(settings.database_url))
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return Path(url.database).parent / FIRST_TOKENS
    return data_dir() / FIRST_TOKENS


def write_first_tokens(path: Path, made: dict[Role, str]) -> Path:
    """Write the tokens a first start made to `path`, readable by this user only (0600).

    The file is created with mode 0600 (never world-readable, not even for a
    moment); an older file there is replaced.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(
            "# Tokens Schedulearn made at its first start. Keep this file private; delete it\n"
            "# once the tokens are stored elsewhere. Revoke with `schedulearn token revoke ID`.\n"
        )
        for role, secret in made.items():
            out.write(f"{role.value}_token={secret}\n")
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return path
