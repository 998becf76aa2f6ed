"""Alembic environment: runs on the connection `server.db.migrate` hands it.

After the revisions, one generic step adds the columns of fields declared
in `core.views` that the database does not have yet (nullable or with a
default; see `server.declared.add_missing_columns`), so adding a job or
node field needs no migration file. Anything else (a new table, a type
change, a renamed column) still gets a revision in `versions/`.
"""

from __future__ import annotations

import logging

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from schedulearn.server import models  # noqa: F401  (registers the tables)
from schedulearn.server.declared import add_missing_columns

target_metadata = SQLModel.metadata
config = context.config
log = logging.getLogger("schedulearn.server.migrations")


def _upgrade(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
        if not context.is_offline_mode():
            for added in add_missing_columns(connection, target_metadata):
                log.info("added the declared column %s", added)


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
        with engine.begin() as conn:
            _upgrade(conn)
        return
    _upgrade(connection)


run()
