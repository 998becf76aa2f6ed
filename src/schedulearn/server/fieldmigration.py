"""The Alembic revision a change to the declared fields needs, generated.

`scripts/new-field` first writes the typed blocks of declared fields
(`server.fieldcode`), then runs this module in a new process, so that
the table models it imports are the rewritten ones. `generate` makes a
scratch SQLite database at the newest revision by running the revisions
themselves, compares it with the table models (Alembic's autogenerate,
through `migrations/env.py`) and writes what differs as the next
revision, `migrations/versions/NNNN_<slug>.py`: a new declared field
becomes an `add_column` with the default that rows already stored get.

`pending` is that comparison alone: `scripts/new-field --check` and
tests/integration/test_migrations.py fail while it finds anything.

A revision autogenerate cannot write (a rename, filling old rows with
something other than the default, a new table's data) is written or
edited by hand, as any other revision.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

from schedulearn.server import db, fieldcode

VERSIONS = db.MIGRATIONS / "versions"
# alembic_version.version_num is a VARCHAR(32).
_MAX_ID = 32


def next_revision_id(message: str, head: str | None) -> str:
    """`NNNN_<slug of message>`: the number after the head's, as the files are named."""
    if head is None or not re.match(r"^\d{4}_", head):
        raise ValueError(f"the newest revision {head!r} is not one NNNN_name revision")
    slug = re.sub(r"[^a-z0-9]+", "_", message.lower()).strip("_") or "declared_fields"
    return f"{int(head[:4]) + 1:04d}_{slug}"[:_MAX_ID].rstrip("_")


@contextmanager
def _at_head() -> Iterator[db.Database]:
    """A scratch SQLite database brought to the newest revision by the revisions."""
    with tempfile.TemporaryDirectory(prefix="schedulearn-fields-") as scratch:
        database = db.Database(f"sqlite:///{Path(scratch) / 'head.db'}")
        try:
            db.run_revisions(database.engine)
            yield database
        finally:
            database.close()


def pending() -> list[Any]:
    """What the table models have that the revisions do not make (Alembic's diff)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlmodel import SQLModel

    from schedulearn.server import models  # noqa: F401  (registers the tables)

    with _at_head() as database, database.engine.connect() as conn:
        return list(compare_metadata(MigrationContext.configure(conn), SQLModel.metadata))


def describe(change: Any) -> str:
    """One change `pending` found, in words: "add column job.project"."""
    if (
        isinstance(change, tuple)
        and len(change) == 4
        and change[0] in ("add_column", "remove_column")
    ):
        verb, _, table, column = change
        return f"{verb.replace('_', ' ')} {table}.{column.name}"
    return repr(change)  # an index, a type, a table: Alembic's own form


def generate(message: str, directory: Path = VERSIONS) -> Path | None:
    """Write the revision the table models need (None: they need none)."""
    from alembic import command
    from alembic.config import Config

    if not pending():
        return None
    rev_id = next_revision_id(message, db.head_revision())
    cfg = Config()
    cfg.set_main_option("script_location", str(db.MIGRATIONS))
    cfg.set_main_option("version_locations", str(directory))
    cfg.set_main_option("file_template", "%%(rev)s")
    with _at_head() as database, database.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        with redirect_stdout(io.StringIO()):  # Alembic's "Generating ..."; main() prints the path
            command.revision(cfg, message=message, autogenerate=True, rev_id=rev_id)
    return directory / f"{rev_id}.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/new-field",
        description="Write the typed code and the Alembic revision of the fields declared "
        "in core/views.py.",
    )
    parser.add_argument("step", choices=("code", "migration", "check"))
    parser.add_argument("message", nargs="?", help="what changed, for the revision's name")
    args = parser.parse_args(argv)
    if args.step == "code":
        for path in fieldcode.write():
            print(f"wrote the declared fields of {path}")
        return 0
    if args.step == "check":
        problems = [f"{p} is stale: run scripts/new-field" for p in fieldcode.stale()]
        problems += [f"no revision makes '{describe(c)}': run scripts/new-field" for c in pending()]
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    if not args.message:
        if pending():
            parser.error('say what changed, for the revision: scripts/new-field "job project"')
        return 0
    written = generate(args.message)
    print(written if written is not None else "", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
