"""A database made by an earlier release keeps every job on upgrade.

Two earlier releases: the commit before the newest revision
(`PREVIOUS_SCHEMA`), and 0.1.0, the last one published (`RELEASE_0_1_0`).
`previous_db.py` builds the database with that release's own code (its
source from git history): its server start makes the schema, its
services submit jobs with every field it knows and register a node.
This checkout's server start (`db.migrate`) then upgrades it by the
revisions, and every job and node must read back as that release showed
it, every stored value unchanged, and the schema must be the models'.
On SQLite and PostgreSQL (SCHEDULEARN_TEST_POSTGRES=both).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

from previous_source import source_at
from schedulearn.server import db, models  # noqa: F401  (registers the tables)
from schedulearn.server.services import jobs, nodes, snapshot

# The last commit before revision 0015_node_drain_reason: schema at 0014. Move it
# to the commit before the next revision that changes tables with rows.
PREVIOUS_SCHEMA = "3bde86d76a2852301603bdcfa9cd990cfb22d6d8"
# Schedulearn 0.1.0 (the commit tests/e2e/test_compat.py runs as that release):
# revision 0003, before queues, holds, arrays' limits and node capabilities.
RELEASE_0_1_0 = "fe41f5cdce91ef46219b520d7551b86095a2273b"
RELEASES = {PREVIOUS_SCHEMA: "0014_job_dependency_time_limit", RELEASE_0_1_0: "0003"}
BUILDER = Path(__file__).with_name("previous_db.py")
# What a job shows that is worked out when it is shown, by the rules of the
# release showing it (which 0.1.0 worded otherwise: "resources are free, but
# 1 job ahead wait first" is now "no healthy node can run it: no node runs
# container images..."). Compared for the previous schema's code, not 0.1.0's.
COMPUTED = {"waiting_reason", "queue_position", "predicted_start_at", "predicted_end_at"}


@pytest.fixture(scope="module", params=list(RELEASES), ids=["previous-schema", "0.1.0"])
def release(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    commit: str = request.param
    return commit


@pytest.fixture(scope="module")
def previous_src(release: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return source_at(release, tmp_path_factory.mktemp("release"))


def _built_by_previous(src: Path, url: str, out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, str(BUILDER), url, str(out)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"previous_db.py failed:\n{done.stdout}\n{done.stderr}"
    built: dict[str, Any] = json.loads(out.read_text())
    return built


def _rows(engine: sa.Engine, table: str) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        result = conn.execute(sa.text(f'SELECT * FROM "{table}" ORDER BY 1'))
        # Through JSON as the builder wrote them, so both sides have one form.
        rows: list[dict[str, Any]] = json.loads(
            json.dumps([dict(r._mapping) for r in result], default=str)
        )
        return rows


def _lost(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Every key of `before` whose value `after` lacks or changed: (was, is)."""
    return {k: (v, after.get(k, "<gone>")) for k, v in before.items() if after.get(k) != v}


def test_upgrading_an_earlier_releases_database_keeps_every_job(
    release: str, previous_src: Path, empty_database_url: str, tmp_path: Path
) -> None:
    built = _built_by_previous(previous_src, empty_database_url, tmp_path / "built.json")
    assert built["revision"] == RELEASES[release]
    assert len(built["jobs"]) == 8

    database = db.Database(empty_database_url)
    try:
        db.migrate(database.engine)  # this release's server start
        with database.engine.connect() as conn:
            stamped = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
            diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
        assert stamped == db.head_revision() != built["revision"]
        assert diff == [], f"the upgraded schema is not the models': {diff}"

        for table in ("job", "node"):
            before, after = built["rows"][table], _rows(database.engine, table)
            assert [r["id" if table == "job" else "name"] for r in after] == [
                r["id" if table == "job" else "name"] for r in before
            ]
            changed = {i: _lost(b, a) for i, (b, a) in enumerate(zip(before, after, strict=True))}
            assert not any(changed.values()), f"{table} rows changed on upgrade: {changed}"

        with database.session() as session:
            for job_id, shown in built["jobs"].items():
                now = jobs.show(session, int(job_id), "fifo", 1_000_000.0).model_dump(mode="json")
                if release == RELEASE_0_1_0:
                    shown = {k: v for k, v in shown.items() if k not in COMPUTED}
                assert not _lost(shown, now), f"job {job_id} on upgrade: {_lost(shown, now)}"
            [node] = nodes.list_nodes(session, {}).items
            assert not _lost(built["nodes"][0], node.model_dump(mode="json"))
            # The scheduler's pass reads every job it did before.
            view = snapshot.build(session, 1_000_010.0).view
            in_pass = {j.id for j in (*view.pending, *view.running)}
            unfinished = {int(i) for i, j in built["jobs"].items() if j["state"] != "succeeded"}
            assert in_pass == unfinished
            assert {j.id: j.held for j in view.pending if j.held} == {
                int(i): True for i, j in built["jobs"].items() if j.get("held")
            }
    finally:
        database.close()
