"""the columns earlier servers added at start, now made by a revision

Revision ID: 0013_declared_columns
Revises: 0012_log_seq_bigint
Create Date: 2026-11-28 15:32:22

Until this revision a server added, at every start and outside Alembic,
each column of the table models that the database lacked: the fields
declared in `core.views` (`job.constraints`, `queue`, `array_size`,
`array_limit`, `held`; `node.capabilities`, `drained`, `containment`) and
`job.secret_env`, none of which any revision made. From here on the
schema changes only by revisions (`scripts/new-field` generates those of
new declared fields), so this one adds those columns.

A database at 0012 that an earlier server started has them already; one
the revisions alone brought to 0012 has none. So each column is added
only where it is missing, with the type, nullability and default that
earlier servers gave it (rows already stored get the default). Written
from `scripts/new-field "declared columns"`'s output, with that check added.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # the AutoString columns below; `sqlmodel` does not re-export `sql`
from alembic import op

revision = "0013_declared_columns"
down_revision = "0012_log_seq_bigint"
branch_labels = None
depends_on = None

# A node's capabilities before its agent reports any: process jobs only.
_PLAIN = '{"executors": ["process"], "container_runtime": "", "labels": [], "accounts": null}'


def _columns() -> dict[str, list[sa.Column[object]]]:
    text = sqlmodel.sql.sqltypes.AutoString
    return {
        "job": [
            sa.Column("secret_env", sa.JSON(), nullable=True),
            sa.Column("constraints", sa.JSON(), server_default="[]", nullable=False),
            sa.Column("queue", text(), server_default="", nullable=False),
            sa.Column("array_size", sa.Integer(), nullable=True),
            sa.Column("array_limit", sa.Integer(), nullable=True),
            sa.Column("held", sa.Boolean(), server_default=sa.false(), nullable=False),
        ],
        "node": [
            sa.Column("capabilities", sa.JSON(), server_default=_PLAIN, nullable=False),
            sa.Column("drained", sa.Boolean(), server_default=sa.false(), nullable=False),
            sa.Column("containment", text(), server_default="", nullable=False),
        ],
    }


def upgrade() -> None:
    seen = sa.inspect(op.get_bind())
    for table, columns in _columns().items():
        have = {c["name"] for c in seen.get_columns(table)}
        missing = [c for c in columns if c.name not in have]
        if missing:
            with op.batch_alter_table(table, schema=None) as batch_op:
                for column in missing:
                    batch_op.add_column(column)


def downgrade() -> None:
    # Back to 0012 as the revisions alone made it: earlier servers add the
    # columns again at their next start.
    for table, columns in _columns().items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            for column in reversed(columns):
                batch_op.drop_column(column.name)
