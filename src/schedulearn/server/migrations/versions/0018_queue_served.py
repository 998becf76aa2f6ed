"""queue served: the part of a queue's decayed usage by jobs that fit its guarantee

Revision ID: 0018_queue_served
Revises: 0017_queue_parent
Create Date: 2026-11-28 22:30:00.000000

A queue is judged ahead or behind on that part (`core.fairshare_queues.
Tenancy.served`; issue 32). Existing rows start with all of their usage
counted, as the rule before counted it, so no queue turns behind at the
upgrade; from then on the scheduler's rounds keep the two apart.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_queue_served"
down_revision = "0017_queue_parent"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("queue_usage", schema=None) as batch_op:
        batch_op.add_column(sa.Column("served", sa.Float(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("serving", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE queue_usage SET served = usage, serving = busy")


def downgrade() -> None:
    with op.batch_alter_table("queue_usage", schema=None) as batch_op:
        batch_op.drop_column("serving")
        batch_op.drop_column("served")
