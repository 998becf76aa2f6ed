"""CPU per heartbeat: the server's heartbeat service alone, on SQLite and PostgreSQL.

One node with 8 GPUs runs 8 one-GPU jobs (placed and started over the real
API in process); then `agent_access.heartbeat`, which every node calls every
`heartbeat_seconds`, records a heartbeat listing those 8 runs, N times, each
in its own transaction on the database threads' path (`Database.call`). It
prints the CPU this process spent per heartbeat (its SQL driver included;
PostgreSQL's own CPU not) and the wall time. bench/scale.py measures the
same thing whole (HTTP included) as the idle cluster's CPU per node-second.

    uv run python bench/heartbeat_cost.py [--beats 2000] [--database sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from schedulearn.cli.localpostgres import LocalPostgres
from schedulearn.protocol import Heartbeat, RunningJobReport
from schedulearn.server import create_app
from schedulearn.server.auth import hash_token
from schedulearn.server.services import agent_access, enrollment
from schedulearn.settings import ServerSettings

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests"), str(HERE.parent / "tests" / "integration")]
from machine import describe, speed_line  # noqa: E402
from server_api import ADMIN, AGENT, Api, on_app_loop  # noqa: E402
from wire_agent import WireAgent  # noqa: E402


def measure(url: str, data: Path, beats: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per heartbeat on the database at `url`."""
    settings = ServerSettings(
        database_url=url, admin_token=ADMIN, agent_token=AGENT, node_timeout_seconds=600,
        data_dir=data,
    )  # fmt: skip
    with TestClient(create_app(settings)) as client:
        api = Api(client)
        node = WireAgent(api, "n1", gpus=8)
        node.register()
        for _ in range(8):
            r = api.post("/api/v1/jobs", json={"command": ["true"], "gpus": 1})
            assert r.status_code == 201, r.text
        starts = node.work_until(lambda b: len(b.starts) >= 8).starts
        for a in starts:
            node.start(a.job_id, a.attempt)
        on_app_loop(client, api.state.scheduler.stop)  # the heartbeats alone from here
        state = api.state
        credential = node.headers["Authorization"].split()[1]
        who = state.db.call(enrollment.identify, hash_token(credential), time.time())
        body = Heartbeat(
            name="n1", running=[RunningJobReport(job_id=a.job_id, attempt=1) for a in starts]
        )

        def beat() -> None:
            got = state.db.call(agent_access.heartbeat, who, body, time.time(), state.timing)
            assert got.known and not got.orphans, got

        for _ in range(min(200, beats)):
            beat()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(beats):
            beat()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return cpu / beats * 1000, wall / beats * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--beats", type=int, default=2000)
    p.add_argument("--database", default="sqlite,postgresql")
    args = p.parse_args()
    print(f"machine: {describe()}")
    print(speed_line())
    for backend in args.database.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            pg = LocalPostgres() if backend == "postgresql" else None
            try:
                url = pg.new_database() if pg else f"sqlite:///{tmp}/heartbeats.db"
                cpu, wall = measure(url, Path(tmp), args.beats)
            finally:
                if pg is not None:
                    pg.remove()
        print(
            f"{backend}: {cpu:.2f} ms of CPU per heartbeat (8 runs listed; this process), "
            f"{wall:.2f} ms wall, over {args.beats}"
        )


if __name__ == "__main__":
    main()
