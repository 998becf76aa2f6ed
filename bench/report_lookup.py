"""What an agent's report costs the server as its node's history grows.

Every report an agent sends (an event batch, log lines, progress) first
finds its job part: by job, attempt and node. This times those lookups,
the server's own functions on a real SQLite database (the embedded
default) migrated to the newest revision, after a node has run 0, 1,000,
10,000 and 100,000 jobs (finished parts, written straight into
`job_part`):

- an event batch of 20 exits (`agent_access.record_events`; its jobs are
  unknown, so nothing else is written and the lookup is what is timed);
- the checks before a log batch or a progress report is stored
  (`agent_access.require_attempt` and `require_live`), for the node's
  latest job (with no history, a job that does not exist).

A figure that grows with the history is a lookup walking the node's
past (docs/results.md 6.10). Prints the machine and its single-core
speed (bench/machine.py); asserts nothing.

    uv run python bench/report_lookup.py
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from machine import describe, speed_line
from sqlmodel import Session

from schedulearn.protocol import EventKind, JobEventReport
from schedulearn.server.db import Database, migrate
from schedulearn.server.errors import Forbidden, NotFound
from schedulearn.server.models import JobPart, PartStatus
from schedulearn.server.services import agent_access
from schedulearn.server.services.enrollment import AgentIdentity

NODE = "n1"
BATCH = 20


def with_history(root: Path, jobs: int) -> Database:
    """A migrated database where `NODE` has run `jobs` jobs, all ended."""
    db = Database(f"sqlite:///{root / f'history-{jobs}.db'}")
    migrate(db.engine)
    rows = [
        {
            "job_id": job_id,
            "attempt": 1,
            "node": NODE,
            "rank": 0,
            "gpus": [job_id % 8],
            "status": PartStatus.EXITED,
            "delivered": True,
            "stop_sent": False,
            "exit_code": 0,
            "last_reported": 0.0,
        }
        for job_id in range(1, jobs + 1)
    ]
    with db.engine.begin() as conn:
        for start in range(0, len(rows), 10_000):
            conn.execute(JobPart.__table__.insert(), rows[start : start + 10_000])
    return db


def per_call_ms(db: Database, call: Callable[[Session], None], repeat: int) -> float:
    with db.session() as session:
        call(session)  # warm: statements compiled and cached
        began = time.perf_counter()
        for _ in range(repeat):
            call(session)
        return (time.perf_counter() - began) / repeat * 1000


def event_batch(session: Session, batch: list[JobEventReport]) -> None:
    agent_access.record_events(session, AgentIdentity("bench", NODE), batch, 0.0)
    session.rollback()


def report_checks(session: Session, job_id: int) -> None:
    with contextlib.suppress(Forbidden, NotFound):
        agent_access.require_attempt(session, NODE, job_id, 1)
    agent_access.require_live(session, NODE, job_id, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", default="0,1000,10000,100000", help="jobs the node has run")
    parser.add_argument("--repeat", type=int, default=50, help="timed calls of each lookup")
    args = parser.parse_args()
    print(describe())
    print(speed_line())
    print(f"{'jobs run on the node':>22} | {'event batch of 20':>18} | {'log/progress check':>18}")
    with tempfile.TemporaryDirectory(prefix="report-lookup-") as tmp:
        for jobs in (int(n) for n in args.history.split(",")):
            db = with_history(Path(tmp), jobs)
            batch = [
                JobEventReport(
                    job_id=jobs + 1 + i, attempt=1, node=NODE, kind=EventKind.EXITED, at=0.0
                )
                for i in range(BATCH)
            ]
            try:
                batch_ms = per_call_ms(db, partial(event_batch, batch=batch), args.repeat)
                check_ms = per_call_ms(db, partial(report_checks, job_id=jobs), args.repeat)
            finally:
                db.close()
            print(f"{jobs:>22,} | {batch_ms:>15.3f} ms | {check_ms:>15.3f} ms")


if __name__ == "__main__":
    main()
