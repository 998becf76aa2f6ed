"""Adding a job field as a contributor does, in a copy of the source tree.

The copy gets one declaration in core/views.py (`project`, the worked
example of docs/adding-a-field.md) and the two steps of
`scripts/new-field "job project"`: the blocks of declared fields, then
the revision. A database this checkout made, with jobs in it, is then
upgraded by the copy's server start: every job keeps what it showed and
reads the new field's default, and a new job stores and shows its
project. On SQLite and PostgreSQL (SCHEDULEARN_TEST_POSTGRES=both).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from previous_db import build

import schedulearn

DECLARATION = (
    "    held: bool = field(default=False, metadata=KEPT)\n",
    "    project: str = field(default='', metadata=SUBMITTED)\n",
)
# Run by the copy's code: its server start, every job shown, one new job with a project.
AFTER = """
import json, sys
from schedulearn.protocol import JobSpec
from schedulearn.server import db
from schedulearn.server.auth import Caller, Role
from schedulearn.server.services import jobs

database = db.Database(sys.argv[1])
db.migrate(database.engine)
with database.session() as session:
    ids = [int(i) for i in json.loads(sys.argv[2])]
    shown = {i: jobs.show(session, i, "fifo", 1e6).model_dump(mode="json") for i in ids}
    spec = JobSpec.model_validate({"command": ["true"], "project": "p1"})
    [done] = jobs.submit(session, [(spec, Caller("bob", Role.USER))], 1e6 + 1)
    new = jobs.show(session, done.jobs[0].id, "fifo", 1e6 + 1)
print(json.dumps({"shown": shown, "new_project": new.project}))
database.close()
"""


def _run(tree: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True, text=True, timeout=300, cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree / "src")},
    )  # fmt: skip
    assert done.returncode == 0, f"{args[:3]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the source with the field declared and scripts/new-field's steps run."""
    root = tmp_path_factory.mktemp("new-field")
    package = Path(schedulearn.__file__).parent
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(package, root / "src" / "schedulearn", ignore=skip)
    views = root / "src" / "schedulearn" / "core" / "views.py"
    anchor, field = DECLARATION
    text = views.read_text()
    assert anchor in text, "the anchor line moved: update DECLARATION"
    views.write_text(text.replace(anchor, anchor + field))
    _run(root, "-m", "schedulearn.server.fieldmigration", "code")
    revision = _run(root, "-m", "schedulearn.server.fieldmigration", "migration", "job project")
    assert revision.endswith("_job_project.py"), revision
    return root


def test_the_command_writes_the_typed_fields_and_the_revision(tree: Path) -> None:
    package = tree / "src" / "schedulearn"
    protocol = (package / "protocol.py").read_text()
    models = (package / "server" / "models.py").read_text()
    assert protocol.count('    project: BoundedText = ""\n') == 2  # JobSpec and JobPublic
    assert '    project: str = column(JobView, "project")\n' in models
    [revision] = (package / "server" / "migrations" / "versions").glob("*_job_project.py")
    # As Alembic wrote it (scripts/new-field then formats it with ruff).
    text = revision.read_text().replace("'", '"')
    assert 'add_column(sa.Column("project", ' in text and 'server_default=""' in text


def test_a_database_made_before_the_field_keeps_its_jobs_and_gets_the_field(
    tree: Path, empty_database_url: str
) -> None:
    before: dict[str, Any] = build(empty_database_url)  # this checkout, without the field
    after = json.loads(
        _run(tree, "-c", AFTER, empty_database_url, json.dumps(list(before["jobs"])))
    )
    for job_id, shown in before["jobs"].items():
        now = after["shown"][job_id]
        lost = {k: (v, now.get(k)) for k, v in shown.items() if now.get(k) != v}
        assert not lost, f"job {job_id} lost on upgrade: {lost}"
        assert now["project"] == ""
    assert after["new_project"] == "p1"
