"""identity: tokens that end (id, name, expiry, last use, revocation), users as records,
server-side web sessions

The token table is rebuilt with an integer id (what `token list` shows and
`token revoke` takes) instead of the hash as its key; existing tokens keep
working. Every user who holds a user or admin token, or owns a job, gets a
user record with the defaults (unix account = their name, no root, the
server's priority range). The page secret of the old signed cookies goes:
those cookies stop working, so browsers sign in again once.

Revision ID: 0004_identity
Revises: 0003
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

import time

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # the AutoString columns below; `sqlmodel` does not re-export `sql`
from alembic import op

revision = "0004_identity"
down_revision = "0003"
branch_labels = None
depends_on = None

_text = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table(
        "token_new",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hash", _text(), nullable=False),
        sa.Column("user", _text(), nullable=False),
        sa.Column("role", _text(), nullable=False),
        sa.Column("name", _text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("last_used_at", sa.Float(), nullable=True),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    old = sa.table(
        "token",
        sa.column("hash"),
        sa.column("user"),
        sa.column("role"),
        sa.column("created_at"),
    )
    new = sa.table(
        "token_new",
        sa.column("hash"),
        sa.column("user"),
        sa.column("role"),
        sa.column("name"),
        sa.column("created_at"),
    )
    op.execute(
        new.insert().from_select(
            ["hash", "user", "role", "name", "created_at"],
            sa.select(
                old.c.hash, old.c.user, old.c.role, sa.literal(""), old.c.created_at
            ).order_by(old.c.created_at),
        )
    )
    op.drop_table("token")
    op.rename_table("token_new", "token")
    op.create_index("ix_token_hash", "token", ["hash"], unique=True)
    op.create_index("ix_token_user", "token", ["user"])

    op.create_table(
        "app_user",
        sa.Column("name", _text(), nullable=False),
        sa.Column("unix_account", _text(), nullable=True),
        sa.Column("allow_root", sa.Boolean(), nullable=False),
        sa.Column("priority_max", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("disabled_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    token = sa.table("token", sa.column("user"), sa.column("role"))
    job = sa.table("job", sa.column("user"))
    owners = sa.union(
        sa.select(token.c.user).where(token.c.role != "agent"), sa.select(job.c.user)
    ).subquery()
    users = sa.table(
        "app_user",
        sa.column("name"),
        sa.column("allow_root"),
        sa.column("created_at"),
    )
    op.execute(
        users.insert().from_select(
            ["name", "allow_root", "created_at"],
            sa.select(owners.c.user, sa.false(), sa.literal(time.time())),
        )
    )

    op.create_table(
        "web_session",
        sa.Column("id_hash", _text(), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("csrf", _text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id_hash"),
    )
    op.create_index("ix_web_session_token_id", "web_session", ["token_id"])
    setting = sa.table("setting", sa.column("key"))
    op.execute(setting.delete().where(setting.c.key == "web_secret"))


def downgrade() -> None:
    op.drop_index("ix_web_session_token_id", table_name="web_session")
    op.drop_table("web_session")
    op.drop_table("app_user")
    op.create_table(
        "token_old",
        sa.Column("hash", _text(), nullable=False),
        sa.Column("user", _text(), nullable=False),
        sa.Column("role", _text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("hash"),
    )
    new = sa.table(
        "token",
        sa.column("hash"),
        sa.column("user"),
        sa.column("role"),
        sa.column("created_at"),
        sa.column("revoked_at"),
    )
    old = sa.table(
        "token_old",
        sa.column("hash"),
        sa.column("user"),
        sa.column("role"),
        sa.column("created_at"),
    )
    # Revoked tokens are dropped: the old schema could not tell them apart.
    op.execute(
        old.insert().from_select(
            ["hash", "user", "role", "created_at"],
            sa.select(new.c.hash, new.c.user, new.c.role, new.c.created_at).where(
                new.c.revoked_at.is_(None)
            ),
        )
    )
    op.drop_index("ix_token_user", table_name="token")
    op.drop_index("ix_token_hash", table_name="token")
    op.drop_table("token")
    op.rename_table("token_old", "token")
