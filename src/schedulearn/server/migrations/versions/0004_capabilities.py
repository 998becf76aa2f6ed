"""node capabilities and job constraints: node.capabilities, job.constraints

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("node", sa.Column("capabilities", sa.JSON(), nullable=True))
    # Existing jobs ask for no label.
    op.add_column(
        "job",
        sa.Column("constraints", sa.JSON(), nullable=False, server_default=sa.text("'[]'")),
    )


def downgrade() -> None:
    op.drop_column("job", "constraints")
    op.drop_column("node", "capabilities")
