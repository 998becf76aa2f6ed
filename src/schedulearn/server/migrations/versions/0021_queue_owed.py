"""queue owed: the GPU-time a queue was owed, decayed like its usage

Revision ID: 0021_queue_owed
Revises: 0020_partial_round_indexes
Create Date: 2026-11-29 10:10:00.000000

A queue is judged ahead or behind on its served use against what it was
owed: the GPUs its jobs that fit its guarantee asked for, up to that
guarantee (`core.fairshare_queues.Tenancy.owed`; issue 32). Existing rows
start as if each queue had been owed exactly what it was served, so no
queue turns behind at the upgrade; from then on the scheduler's rounds
keep the two apart.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_queue_owed"
down_revision = "0020_partial_round_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("queue_usage", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owed", sa.Float(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("owing", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE queue_usage SET owed = served, owing = serving")


def downgrade() -> None:
    with op.batch_alter_table("queue_usage", schema=None) as batch_op:
        batch_op.drop_column("owing")
        batch_op.drop_column("owed")
