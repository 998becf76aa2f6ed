"""Migration 0004 (identity) on a database made by the release before it: tokens keep
working (now with an id), every token holder and job owner gets a user record, and
the old page secret goes."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext, RevisionStep
from alembic.script import ScriptDirectory

from schedulearn.server import auth, db
from schedulearn.server.services import users


def _upgrade_to(database: db.Database, target: str) -> None:
    """The revisions up to `target` alone: without `migrations/env.py`'s step that adds
    today's columns, so the tables are as that release made them."""
    cfg = Config()
    cfg.set_main_option("script_location", str(db.MIGRATIONS))
    script = ScriptDirectory.from_config(cfg)

    def revisions(rev: str, _context: MigrationContext) -> list[RevisionStep]:
        return script._upgrade_revs(target, rev)

    with (
        database.engine.begin() as conn,
        EnvironmentContext(cfg, script, fn=revisions, destination_rev=target) as env,
    ):
        env.configure(connection=conn, render_as_batch=True)
        with env.begin_transaction():
            env.run_migrations()


def test_tokens_and_owners_survive_the_identity_migration(empty_database_url: str) -> None:
    database = db.Database(empty_database_url)
    try:
        _upgrade_to(database, "0003")
        with database.engine.begin() as conn:
            conn.execute(
                sa.text(
                    'INSERT INTO token (hash, "user", role, created_at) VALUES '
                    "(:a, 'admin', 'admin', 1.0), (:u, 'alice', 'user', 2.0), "
                    "(:g, 'agent', 'agent', 3.0)"
                ),
                {
                    "a": auth.hash_token("old-admin"),
                    "u": auth.hash_token("old-alice"),
                    "g": auth.hash_token("old-agent"),
                },
            )
            conn.execute(sa.text("INSERT INTO setting (key, value) VALUES ('web_secret', 'ab')"))
        db.migrate(database.engine)
        bounds = auth.PriorityRange(-100, 0)
        with database.session() as session:
            found = {
                name: auth.lookup(session, auth.hash_token(name), 10.0, bounds)
                for name in ("old-admin", "old-alice", "old-agent")
            }
            callers = {n: f[0] for n, f in found.items() if not isinstance(f, auth.Refusal)}
            assert {n: (c.user, c.role, c.token_id) for n, c in callers.items()} == {
                "old-admin": ("admin", auth.Role.ADMIN, 1),
                "old-alice": ("alice", auth.Role.USER, 2),
                "old-agent": ("agent", auth.Role.AGENT, 3),
            }
            # Token holders have records (agents are not users).
            assert users.unix_account_of(session, "alice") is not None
            assert users.unix_account_of(session, "admin") is not None
            assert users.unix_account_of(session, "agent") is None
            secret = session.execute(
                sa.text("SELECT count(*) FROM setting WHERE key = 'web_secret'")
            ).scalar()
            assert secret == 0
    finally:
        database.close()
