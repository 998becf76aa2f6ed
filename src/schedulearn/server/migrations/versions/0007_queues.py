"""tenant queues: guarantees, limits, weights, members, decayed usage, use over time

Revision ID: 0007_queues
Revises: 0006_idempotency
Create Date: 2026-11-23 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # AutoString columns; `sqlmodel` does not re-export `sql`
from alembic import op

revision = "0007_queues"
down_revision = "0006_idempotency"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_queue",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("guaranteed", sa.JSON(), nullable=False),
        sa.Column("gpu_limit", sa.Integer(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "queue_member",
        sa.Column("queue", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("user", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("queue", "user"),
    )
    op.create_index("ix_queue_member_user", "queue_member", ["user"])
    op.create_table(
        "queue_usage",
        sa.Column("queue", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("usage", sa.Float(), nullable=False),
        sa.Column("busy", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("half_life", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("queue"),
    )
    op.create_table(
        "queue_sample",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("queue", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("used", sa.Integer(), nullable=False),
        sa.Column("guaranteed", sa.Integer(), nullable=False),
        sa.Column("share", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_queue_sample_at", "queue_sample", ["at"])


def downgrade() -> None:
    op.drop_index("ix_queue_sample_at", table_name="queue_sample")
    op.drop_table("queue_sample")
    op.drop_table("queue_usage")
    op.drop_index("ix_queue_member_user", table_name="queue_member")
    op.drop_table("queue_member")
    op.drop_table("tenant_queue")
