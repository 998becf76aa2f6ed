"""`Postgres`: a throwaway PostgreSQL 15 server started by the tests themselves
(`cli.localpostgres`: each pytest-xdist worker runs its own), and which
databases the integration tests run on (`backends`).
"""

from __future__ import annotations

import os
from pathlib import Path

from schedulearn.cli.localpostgres import PG_BIN, LocalPostgres

__all__ = ["BOTH", "PG_BIN", "POSTGRESQL", "SQLITE", "Postgres", "backends", "own_stores"]


SQLITE = "sqlite"
POSTGRESQL = "postgresql"
BOTH = "both"


def backends() -> tuple[str, ...]:
    """The databases the integration tests run on, from SCHEDULEARN_TEST_POSTGRES:
    unset: SQLite; `1`: PostgreSQL; `both`: each test that uses a database runs
    on each (one pytest run, so pytest-xdist balances the two as one suite)."""
    chosen = os.environ.get("SCHEDULEARN_TEST_POSTGRES", "")
    if chosen == BOTH:
        return (SQLITE, POSTGRESQL)
    return (POSTGRESQL,) if chosen == "1" else (SQLITE,)


def own_stores(database_url: str, folder: Path) -> dict[str, str]:
    """The server settings that give a server on `database_url` full-log and
    checkpoint stores of its own under `folder`, when the defaults would not.

    On SQLite a server keeps them next to its database file (in the test's
    own folder); on PostgreSQL, in the user's data directory, which every
    server of the machine's tests shares: two tests' job 1 wrote the same
    `logs/job-1/attempt-1.log` (the 100,000-line test once read back the
    8 MB test's cancelled output), and the same `checkpoints/job-1.tar`.
    """
    if database_url.startswith("sqlite"):
        return {}
    return {
        "log_store_dir": str(folder / "full-logs"),
        "checkpoint_store_dir": str(folder / "checkpoint-store"),
    }


class Postgres(LocalPostgres):
    """A throwaway PostgreSQL server owned by the test session."""

    def stop(self) -> None:
        """Stop the server at once; its files are removed in the background.

        A worker's session leaves hundreds of test databases, each a copy
        of the 7.5 MB template: 400 of them made 4.1 GB, whose removal took
        34 s, and every CI worker's last test waited 20-28 s for it (its
        teardown). An `rm` left running after the session costs the run
        nothing.
        """
        self.remove(in_background=True)
