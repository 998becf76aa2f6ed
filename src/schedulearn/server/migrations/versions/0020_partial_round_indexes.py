"""partial job indexes: the waiting jobs that resume, the jobs that need no GPU

Revision ID: 0020_partial_round_indexes
Revises: 0019_partial_job_indexes
Create Date: 2026-11-29 04:40:00.000000

Every scheduling round asks whether a waiting job resumes on a drained
placement (`scheduling.resume`) and whether a waiting job needs no GPU
(`snapshot.could_change`). Through the state indexes each question went
over every waiting job (0.4-0.6 ms a round with 4,000 waiting on SQLite);
these partial indexes hold only the jobs that resume, or that need no GPU
(issue 36 item 5).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020_partial_round_indexes"
down_revision = "0019_partial_job_indexes"
branch_labels = None
depends_on = None

INDEXES = (
    ("ix_job_resuming", "resume_kind IS NOT NULL"),
    ("ix_job_gpuless", "gpus = 0 OR min_gpus = 0"),
)


def upgrade() -> None:
    for name, predicate in INDEXES:
        where = sa.text(predicate)
        op.create_index(name, "job", ["state"], sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    for name, _ in reversed(INDEXES):
        op.drop_index(name, table_name="job")
