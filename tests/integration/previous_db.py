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

It uses only what the previous release had; move it on with
`PREVIOUS_SCHEMA` when that release's API changes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import sqlalchemy as sa
from sqlmodel import select

from schedulearn.protocol import JobSpec, NodeRegistration
from schedulearn.server import db
from schedulearn.server.auth import Caller
from schedulearn.server.auth import Role as CallerRole
from schedulearn.server.models import Job, TenantQueue
from schedulearn.server.services import agents, jobs, nodes

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


def _rows(conn: sa.Connection, table: str) -> list[dict[str, Any]]:
    result = conn.execute(sa.text(f'SELECT * FROM "{table}" ORDER BY 1'))
    return [dict(row._mapping) for row in result]


def build(url: str) -> dict[str, Any]:
    database = db.Database(url)
    try:
        db.migrate(database.engine)
        with database.session() as session:
            session.add(TenantQueue(name="team-a"))
            session.commit()
            ann = Caller("ann", CallerRole.USER)
            results = jobs.submit(session, [(JobSpec.model_validate(s), ann) for s in SPECS], NOW)
            ids = [j.id for r in results if isinstance(r, jobs.Submitted) for j in r.jobs]
            assert len(ids) == len(SPECS) + 2, results  # the array is three jobs
            registration = NodeRegistration.model_validate(
                {
                    "name": "gpu-1",
                    "gpus": [{"index": 0, "type": "a100"}, {"index": 1, "type": "a100"}],
                    "cpus": 32,
                    "memory_gb": 256,
                    "capabilities": {"executors": ["process", "container"], "labels": ["ib"]},
                    "containment": "cgroup v2",
                }
            )
            timing = agents.AgentTiming(1.0, 5.0, 1.0, 29500, None)
            agents.register(session, registration, NOW, timing)
            by_name = {j.name: j for j in session.exec(select(Job)).all()}
            runs, finished, held = by_name["runs"], by_name["finished"], by_name["held"]
            runs.state, runs.placement, runs.started_at = "running", {"gpu-1": [0]}, NOW + 5
            runs.attempt, runs.preemptions, runs.service_seconds = 2, 1, 40.0
            finished.state, finished.exit_code, finished.ended_at = "succeeded", 0, NOW + 9
            finished.started_at, finished.message = NOW + 2, "exit 0"
            held.held = True
            session.commit()
            node = nodes.list_nodes(session, {}).items[0]
            shown = {
                "jobs": {
                    str(i): jobs.show(session, i, "fifo", NOW).model_dump(mode="json") for i in ids
                },
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
