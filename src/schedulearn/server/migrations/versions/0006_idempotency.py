"""idempotency keys of submissions: the jobs a repeated request gets back

Revision ID: 0006_idempotency
Revises: 0005_node_credentials
Create Date: 2026-11-23 16:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # the AutoString columns below; `sqlmodel` does not re-export `sql`
from alembic import op

revision = "0006_idempotency"
down_revision = "0005_node_credentials"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "idempotency_key",
        sa.Column("user", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("fingerprint", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("job_ids", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("user", "key"),
    )
    op.create_index("ix_idempotency_key_created_at", "idempotency_key", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_key_created_at", table_name="idempotency_key")
    op.drop_table("idempotency_key")
