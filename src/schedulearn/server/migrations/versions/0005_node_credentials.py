"""per-node credentials: one-time join tokens and the credentials agents hold

Revision ID: 0005_node_credentials
Revises: 0004_identity
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # the AutoString columns below; `sqlmodel` does not re-export `sql`
from alembic import op

revision = "0005_node_credentials"
down_revision = "0004_identity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "join_token",
        sa.Column("hash", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("node", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("used_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("hash"),
    )
    op.create_index("ix_join_token_node", "join_token", ["node"])
    op.create_table(
        "node_credential",
        sa.Column("hash", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("node", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("hash"),
    )
    op.create_index("ix_node_credential_node", "node_credential", ["node"])


def downgrade() -> None:
    op.drop_index("ix_node_credential_node", table_name="node_credential")
    op.drop_table("node_credential")
    op.drop_index("ix_join_token_node", table_name="join_token")
    op.drop_table("join_token")
