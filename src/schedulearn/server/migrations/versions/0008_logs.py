"""logs kept under a per-job cap (head and tail), full logs uploaded by agents,
and node losses counted apart from a job's restarts

Revision ID: 0008_logs
Revises: 0007_queues
Create Date: 2026-11-24 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # AutoString columns; `sqlmodel` does not re-export `sql`
from alembic import op

revision = "0008_logs"
down_revision = "0007_queues"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job", sa.Column("node_losses", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "job_log_usage",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("head_bytes", sa.Integer(), nullable=False),
        sa.Column("tail_bytes", sa.Integer(), nullable=False),
        sa.Column("marker_id", sa.Integer(), nullable=True),
        sa.Column("cut_bytes", sa.BigInteger(), nullable=False),
        sa.Column("cut_lines", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job_id"),
    )
    op.create_table(
        "job_full_log",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("uploaded_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "attempt"),
    )


def downgrade() -> None:
    op.drop_table("job_full_log")
    op.drop_table("job_log_usage")
    op.drop_column("job", "node_losses")
