"""queue parent: a tenant queue may sit under another (queue trees, issue 32)

Revision ID: 0017_queue_parent
Revises: 0016_web_sign_in
Create Date: 2026-11-28 19:00:00.000000

Existing queues get no parent: they stay root queues, as they were.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # the AutoString column below; `sqlmodel` does not re-export `sql`
from alembic import op

revision = "0017_queue_parent"
down_revision = "0016_web_sign_in"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenant_queue", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parent", sqlmodel.sql.sqltypes.AutoString(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenant_queue", schema=None) as batch_op:
        batch_op.drop_column("parent")
