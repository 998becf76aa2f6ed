"""partial job indexes: the jobs with a time limit, the jobs with a dependency

Revision ID: 0019_partial_job_indexes
Revises: 0018_queue_served
Create Date: 2026-11-29 01:20:00.000000

Every scheduling round reads the running and waiting jobs that have a
time limit (`timelimits.enforce`) and the waiting jobs that have a
dependency (`dependencies.settle`). Through the state indexes each read
went over every waiting job; these partial indexes hold only the jobs
with a limit, or with a dependency (issue 36 item 5).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_partial_job_indexes"
down_revision = "0018_queue_served"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for name, column in (("ix_job_limited", "time_limit"), ("ix_job_dependent", "dependency")):
        where = sa.text(f"{column} IS NOT NULL")
        op.create_index(name, "job", ["state"], sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    op.drop_index("ix_job_dependent", table_name="job")
    op.drop_index("ix_job_limited", table_name="job")
