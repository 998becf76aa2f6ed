"""goodput reports of adaptive jobs: the newest report and the measured steps

Revision ID: 0009_goodput
Revises: 0008_logs
Create Date: 2026-11-24 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_goodput"
down_revision = "0008_logs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "goodput_state",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("samples", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("job_id"),
    )


def downgrade() -> None:
    op.drop_table("goodput_state")
