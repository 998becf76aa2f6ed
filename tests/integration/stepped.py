"""`Stepped`: an in-process app on a `ManualClock` whose scheduler runs only when
the test says.

`create_app(settings, clock)` takes the clock; this stops the app's own
scheduler loop (its ticks and wake-ups run on real time) and gives the test
`advance(seconds)` and `schedule()` (one whole scheduling round, on the app's
event loop). Time-dependent server logic is then tested exactly at the
boundary: a node silent one step short of the timeout is still up, one step
past it is down. No sleeps, nothing that passes because the machine was slow.

Agents here poll for work with `wait=0`: a long-poll measures its wait on the
app's clock, which only the test moves.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient
from server_api import Api, on_app_loop

from schedulearn.clock import ManualClock
from schedulearn.protocol import JobPublic
from schedulearn.server import create_app
from schedulearn.server.scheduler import Round, Scheduler
from schedulearn.settings import ServerSettings

T0 = 1_700_000_000.0  # any fixed epoch time: runs never depend on today's date


class Stepped:
    def __init__(self, client: TestClient, clock: ManualClock) -> None:
        self.client = client
        self.api = Api(client)
        self.clock = clock

    @property
    def scheduler(self) -> Scheduler:
        return self.api.state.scheduler

    def advance(self, seconds: float) -> float:
        self.clock.advance(seconds)
        return self.clock.now()

    def schedule(self) -> Round:
        """One scheduling round (reap silent nodes, then a policy pass), now."""
        round_: Round = on_app_loop(self.client, self.scheduler.run_once)
        return round_

    def job(self, job_id: int) -> JobPublic:
        r = self.api.get(f"/api/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return JobPublic.model_validate(r.json())

    def submit(self, **body: object) -> int:
        r = self.api.post("/api/v1/jobs", json={"command": "x", **body})
        assert r.status_code == 201, r.text
        return int(r.json()["ids"][0])

    def node_healthy(self, name: str) -> bool:
        nodes = {n["name"]: n for n in self.api.get("/api/v1/nodes").json()["items"]}
        return bool(nodes[name]["healthy"])


@contextmanager
def stepped_app(settings: ServerSettings, start: float = T0) -> Iterator[Stepped]:
    clock = ManualClock(start)
    with TestClient(create_app(settings, clock=clock)) as client:
        app = Stepped(client, clock)
        # The loop is the app's; the test drives the rounds instead.
        on_app_loop(client, app.scheduler.stop)
        yield app
