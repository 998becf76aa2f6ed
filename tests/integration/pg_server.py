"""`Postgres`: a throwaway PostgreSQL 15 server started by the tests themselves
(`cli.localpostgres`: each pytest-xdist worker runs its own), and which
databases the integration tests run on (`backends`).
"""

from __future__ import annotations

import os

from schedulearn.cli.localpostgres import PG_BIN, LocalPostgres

__all__ = ["BOTH", "PG_BIN", "POSTGRESQL", "SQLITE", "Postgres", "backends"]


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
