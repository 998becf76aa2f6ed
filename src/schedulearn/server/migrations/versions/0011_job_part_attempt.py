"""an index on a part's job, attempt and node: a report finds its part directly

Revision ID: 0011_job_part_attempt
Revises: 0010_job_state_id
Create Date: 2026-11-27 17:00:00

An agent's reports (events, log lines, progress) each look up their part
by job, attempt and node. With indexes on `job_id` alone and on `(node,
status)`, SQLite chose `node` (one equal column against one) and walked
every part the node had ever run: 5 ms a lookup on a node with 9,250
parts behind it, growing with its history, against 0.07 ms by job. This
index leads with the job, so it also serves every lookup by job alone and
replaces `ix_job_part_job_id`.
"""

from __future__ import annotations

from alembic import op

revision = "0011_job_part_attempt"
down_revision = "0010_job_state_id"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_job_part_job_attempt_node", "job_part", ["job_id", "attempt", "node"], unique=False
    )
    op.drop_index("ix_job_part_job_id", table_name="job_part")


def downgrade() -> None:
    op.create_index("ix_job_part_job_id", "job_part", ["job_id"], unique=False)
    op.drop_index("ix_job_part_job_attempt_node", table_name="job_part")
