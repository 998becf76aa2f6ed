"""web sign in: a password per user (a salted scrypt hash, the role a sign-in gets,
when it was set), one-time sign-in codes (`schedulearn web-login`), and whether a
web session owns the token it signed in with (a password sign-in makes one)

Users keep no password until they set one; sessions already open keep the
token they signed in with (own_token false).

Revision ID: 0015_web_sign_in
Revises: 0014_job_dependency_time_limit
Create Date: 2026-11-28 18:24:56.385659
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # the AutoString columns below; `sqlmodel` does not re-export `sql`
from alembic import op

revision = "0015_web_sign_in"
down_revision = "0014_job_dependency_time_limit"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_login_code",
        sa.Column("code_hash", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("used_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("code_hash"),
    )
    with op.batch_alter_table("app_user", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("password_hash", sqlmodel.sql.sqltypes.AutoString(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("password_role", sqlmodel.sql.sqltypes.AutoString(), nullable=True)
        )
        batch_op.add_column(sa.Column("password_set_at", sa.Float(), nullable=True))

    with op.batch_alter_table("web_session", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("own_token", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("web_session", schema=None) as batch_op:
        batch_op.drop_column("own_token")

    with op.batch_alter_table("app_user", schema=None) as batch_op:
        batch_op.drop_column("password_set_at")
        batch_op.drop_column("password_role")
        batch_op.drop_column("password_hash")

    op.drop_table("web_login_code")
