"""throughput profiles: the live table of (model, batch size, GPU type, GPU count) speeds

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 08:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # the AutoString columns below; `sqlmodel` does not re-export `sql`
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "throughput_profile",
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("gpu_type", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("spread", sa.Boolean(), nullable=False),
        sa.Column("steps_per_sec", sa.Float(), nullable=False),
        sa.Column("samples_per_sec", sa.Float(), nullable=True),
        sa.Column("source", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("reports", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("model", "batch_size", "gpu_type", "gpu_count", "spread"),
    )


def downgrade() -> None:
    op.drop_table("throughput_profile")
