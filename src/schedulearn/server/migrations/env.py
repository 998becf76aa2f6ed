"""Alembic environment: runs on the connection `server.db.migrate` hands it.

Every change to the schema is a revision in `versions/`, the columns of
fields declared in `core.views` included: `scripts/new-field` generates
their revision (`server.fieldmigration`, by Alembic's autogenerate
through this file), so `alembic history` tells the whole schema.
"""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import DefaultClause, create_engine
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import False_, True_
from sqlmodel import SQLModel

from schedulearn.server import models  # noqa: F401  (registers the tables)
from schedulearn.server.declared import EnumText

target_metadata = SQLModel.metadata
config = context.config


def _render_item(kind: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """How a generated revision spells what Alembic would spell for one backend only.

    A str enum's column is text in the database: `sa.String()`, never the
    application's type (a revision stays as it was written). A boolean's
    default is `sa.false()` or `sa.true()`: the scratch database revisions are
    generated on is SQLite, where Alembic would write `sa.text('0')`, which
    PostgreSQL refuses for a boolean column.
    """
    if kind == "type" and isinstance(obj, EnumText):
        return "sa.String()"
    if kind == "server_default" and isinstance(obj, DefaultClause):
        if isinstance(obj.arg, False_):
            return "sa.false()"
        if isinstance(obj.arg, True_):
            return "sa.true()"
    return False  # Alembic's own rendering


def _upgrade(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
        with engine.begin() as conn:
            _upgrade(conn)
        return
    _upgrade(connection)


run()
