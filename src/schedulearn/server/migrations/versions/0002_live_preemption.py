"""live preemption: migration/resize counters, resume placement, progress, checkpoints

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 08:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # the AutoString columns below; `sqlmodel` does not re-export `sql`
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("migrations", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("resizes", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("resume_placement", sa.JSON(), nullable=True))
        batch_op.add_column(
            sa.Column("resume_kind", sqlmodel.sql.sqltypes.AutoString(), nullable=True)
        )
        batch_op.add_column(sa.Column("progress", sa.JSON(), nullable=True))

    op.create_table(
        "job_checkpoint",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("uploaded_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("job_id"),
    )
    op.create_table(
        "progress_record",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("progress_record", schema=None) as batch_op:
        batch_op.create_index("ix_progress_record_job_id", ["job_id", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("progress_record", schema=None) as batch_op:
        batch_op.drop_index("ix_progress_record_job_id")
    op.drop_table("progress_record")
    op.drop_table("job_checkpoint")
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("progress")
        batch_op.drop_column("resume_kind")
        batch_op.drop_column("resume_placement")
        batch_op.drop_column("resizes")
        batch_op.drop_column("migrations")
