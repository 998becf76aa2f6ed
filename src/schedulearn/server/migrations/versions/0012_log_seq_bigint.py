"""a stored line's number is 64 bits on PostgreSQL

Revision ID: 0012_log_seq_bigint
Revises: 0011_job_part_attempt
Create Date: 2026-11-28 05:30:00

An agent numbers a run's lines from 0, and the protocol takes numbers up
to 2**62, but `log_record.seq` was a 32-bit INTEGER on PostgreSQL: the
server refused every batch of a run's lines past 2,147,483,647 ("integer
out of range"), and those lines were missing from its stored log.
SQLite's INTEGER holds 64 bits already and is left as it is. On
PostgreSQL the change rewrites the table: an upgrade takes time in
proportion to the lines stored.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_log_seq_bigint"
down_revision = "0011_job_part_attempt"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _retype_seq(sa.BigInteger(), was=sa.Integer())


def downgrade() -> None:
    _retype_seq(sa.Integer(), was=sa.BigInteger())


def _retype_seq(to: sa.types.TypeEngine[int], was: sa.types.TypeEngine[int]) -> None:
    if op.get_bind().dialect.name == "postgresql":  # SQLite's INTEGER is 64 bits
        op.alter_column("log_record", "seq", type_=to, existing_type=was, existing_nullable=False)
