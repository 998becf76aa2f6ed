"""Build a database as the release before a schema change made it, with jobs in it.

Run it with that release's source first on PYTHONPATH (test_upgrade_keeps_jobs.py
takes it from git history, `PREVIOUS_SCHEMA`):

    PYTHONPATH=<previous>/src python tests/integration/previous_db.py URL OUT.json

That release's own server start (`db.migrate`) makes the schema, and its
own services submit the jobs (every declared field given, an array, a
secret) and register a node; the states a running, a finished and a held
job reach are then written as that release's scheduler and agents write
them. OUT.json gets what that release showed of every job and node
(`JobPublic`, `NodePublic`, as JSON) and every row of `job` and `node`.

It runs on the code of 0.1.0 too (`RELEASE_0_1_0`): a field or a model
that code lacks is left out (`_known`), as its clients could not send it.
Keep it to what both have, or name what differs as `_known` does.
"""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any

import sqlalchemy as sa
from sqlmodel import select

from schedulearn.protocol import JobSpec, JobState, NodeRegistration
from schedulearn.server import db
from schedulearn.server.auth import Caller
from schedulearn.server.auth import Role as CallerRole
from schedulearn.server.models import Job
from schedulearn.server.services import agents, jobs, nodes

try:
    from schedulearn.server.models import TenantQueue
except ImportError:  # 0.1.0: no queues, and no `queue` field to name one
    TenantQueue = None  # type: ignore[assignment,misc]  # absent in that release

NOW = 1_000_000.0
SPECS: list[dict[str, Any]] = [
    {"command": ["true"]},
    {
        "command": "python train.py --epochs 3",
        "name": "every-field",
        "gpus": 2,
        "min_gpus": 1,
        "max_gpus": 4,
        "cpus": 6.5,
        "memory": "8G",
        "gpu_type": "a100",
        "priority": -7,
        "deadline": NOW + 3600,
        "estimated_duration": "30m",
        "model": "resnet50",
        "preemptible": True,
        "image": "busybox:latest",
        "constraints": ["fast-disk", "ib"],
        "queue": "team-a",
        "env": {"LR": "0.1"},
        "secret_env": {"TOKEN": "s3cret"},
        "workdir": "/tmp",
        "launcher": "torchrun",
        "max_restarts": 5,
    },
    {"command": ["echo", "task"], "name": "array", "count": 3, "array_limit": 2},
    {"command": ["sleep", "100"], "name": "runs", "gpus": 1},
    {"command": ["true"], "name": "finished"},
    {"command": ["true"], "name": "held", "priority": 3},
]


def _known(model: Any, values: dict[str, Any]) -> dict[str, Any]:
    """The values a model of this release has fields for."""
    return {k: v for k, v in values.items() if k in model.model_fields}


def _show(session: Any, job_id: int) -> dict[str, Any]:
    if len(inspect.signature(jobs.show).parameters) == 2:  # 0.1.0: show(session, job_id)
        shown = jobs.show(session, job_id)  # type: ignore[call-arg]  # that release's signature
    else:
        shown = jobs.show(session, job_id, "fifo", NOW)
    dumped: dict[str, Any] = shown.model_dump(mode="json")
    return dumped


def _rows(conn: sa.Connection, table: str) -> list[dict[str, Any]]:
    result = conn.execute(sa.text(f'SELECT * FROM "{table}" ORDER BY 1'))
    return [dict(row._mapping) for row in result]


def build(url: str) -> dict[str, Any]:
    database = db.Database(url)
    try:
        db.migrate(database.engine)
        with database.session() as session:
            if TenantQueue is not None:
                session.add(TenantQueue(name="team-a"))
                session.commit()
            ann = Caller("ann", CallerRole.USER)
            specs = [(JobSpec.model_validate(_known(JobSpec, s)), ann) for s in SPECS]
            results = jobs.submit(session, specs, NOW)
            ids = [j.id for r in results if isinstance(r, jobs.Submitted) for j in r.jobs]
            assert len(ids) == len(SPECS) + 2, results  # the array is three jobs
            registration = NodeRegistration.model_validate(
                _known(
                    NodeRegistration,
                    {
                        "name": "gpu-1",
                        "gpus": [{"index": 0, "type": "a100"}, {"index": 1, "type": "a100"}],
                        "cpus": 32,
                        "memory_gb": 256,
                        "capabilities": {"executors": ["process", "container"], "labels": ["ib"]},
                        "containment": "cgroup v2",
                    },
                )
            )
            timing = agents.AgentTiming(1.0, 5.0, 1.0, 29500, None)
            agents.register(session, registration, NOW, timing)
            by_name = {j.name: j for j in session.exec(select(Job)).all()}
            runs, finished, held = by_name["runs"], by_name["finished"], by_name["held"]
            runs.state, runs.placement, runs.started_at = JobState.RUNNING, {"gpu-1": [0]}, NOW + 5
            runs.attempt, runs.preemptions, runs.service_seconds = 2, 1, 40.0
            finished.state, finished.exit_code, finished.ended_at = JobState.SUCCEEDED, 0, NOW + 9
            finished.started_at, finished.message = NOW + 2, "exit 0"
            if hasattr(held, "held"):  # 0.1.0 had no holds
                held.held = True
            session.commit()
            node = nodes.list_nodes(session, {}).items[0]
            shown = {
                "jobs": {str(i): _show(session, i) for i in ids},
                "nodes": [node.model_dump(mode="json")],
            }
        with database.engine.connect() as conn:
            revision = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
            rows = {"job": _rows(conn, "job"), "node": _rows(conn, "node")}
        return {"revision": revision, "rows": rows, **shown}
    finally:
        database.close()


if __name__ == "__main__":
    url, out = sys.argv[1], sys.argv[2]
    with open(out, "w") as f:
        json.dump(build(url), f, default=str, indent=1)
