"""A node that speaks the agent protocol by hand, so API tests can play the
agent's part step by step (register, take work, report starts, exits and
logs) without running jobs. The real agent is exercised in tests/e2e."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from schedulearn.protocol import (
    EventAcks,
    EventKind,
    GpuInfo,
    Heartbeat,
    HeartbeatReply,
    JobEvent,
    JobEventReport,
    LogBatch,
    LogLine,
    NodeRegistration,
    RegistrationReply,
    RunningJobReport,
    WorkBatch,
)


class WireAgent:
    def __init__(self, api: Any, name: str, gpus: int = 4, gpu_type: str = "", **node: Any) -> None:
        self.api = api
        self.name = name
        self.gpus = gpus
        self.gpu_type = gpu_type
        self.node = node
        # Each run's next log line number, as a real agent keeps it (the server
        # skips lines at or below a run's highest stored number: re-sends).
        self.next_seq: dict[tuple[int, int], int] = {}
        self.running: dict[int, int] = {}
        # Its own credential, as a real agent has (`Api.node` enrolls it).
        self.headers: dict[str, str] = api.node(name)

    def _post(self, path: str, body: Any) -> Any:
        r = self.api.post(path, headers=self.headers, json=body.model_dump(mode="json"))
        assert r.status_code == 200, r.text
        return r.json()

    def register(self, running: Sequence[tuple[int, int]] = ()) -> RegistrationReply:
        body = NodeRegistration(
            name=self.name,
            gpus=[
                GpuInfo(index=i, type=self.gpu_type, uuid=f"{self.name}-{i}")
                for i in range(self.gpus)
            ],
            cpus=self.node.get("cpus", 32.0),
            memory_gb=self.node.get("memory_gb", 256.0),
            executors=self.node.get("executors", ["subprocess"]),
            capabilities=self.node.get("capabilities"),
            running=[RunningJobReport(job_id=j, attempt=a) for j, a in running],
        )
        r = self.api.post(
            "/api/v1/agent/register", headers=self.headers, json=body.model_dump(mode="json")
        )
        assert r.status_code == 200, r.text
        return RegistrationReply.model_validate(r.json())

    def heartbeat(self) -> HeartbeatReply:
        body = Heartbeat(
            name=self.name,
            running=[RunningJobReport(job_id=j, attempt=a) for j, a in list(self.running.items())],
        )
        r = self.api.post(
            "/api/v1/agent/heartbeat", headers=self.headers, json=body.model_dump(mode="json")
        )
        assert r.status_code == 200, r.text
        return HeartbeatReply.model_validate(r.json())

    @contextmanager
    def beating(self, every: float = 0.3) -> Iterator[None]:
        """Heartbeats from a thread meanwhile, as a real agent's: the node stays
        up however slowly the test runs, and falls silent when the block ends."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(every):
                self.heartbeat()

        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def work(self, wait: float = 5.0) -> WorkBatch:
        r = self.api.get(
            "/api/v1/agent/work", headers=self.headers, params={"node": self.name, "wait": wait}
        )
        assert r.status_code == 200, r.text
        return WorkBatch.model_validate(r.json())

    def work_until(self, predicate: Any, timeout: float = 30.0) -> WorkBatch:
        """Long-poll until a batch satisfies `predicate` (batches in between are kept)."""
        merged = WorkBatch()
        deadline = time.time() + timeout
        while time.time() < deadline:
            batch = self.work(wait=min(2.0, max(0.1, deadline - time.time())))
            merged.starts += batch.starts
            merged.stops += batch.stops
            if predicate(merged):
                return merged
        raise AssertionError(f"{self.name}: no matching work within {timeout}s; got {merged}")

    def event(
        self,
        job_id: int,
        attempt: int,
        kind: str,
        exit_code: int | None = None,
        message: str = "",
        on_its_own: bool = False,
    ) -> dict[str, Any]:
        body = JobEvent(
            attempt=attempt,
            node=self.name,
            kind=EventKind(kind),
            exit_code=exit_code,
            message=message,
            at=time.time(),
            on_its_own=on_its_own,
        )
        r = self.api.post(
            f"/api/v1/agent/jobs/{job_id}/events",
            headers=self.headers,
            json=body.model_dump(mode="json"),
        )
        assert r.status_code == 200, r.text
        if kind == "started":
            self.running[job_id] = attempt
        else:
            self.running.pop(job_id, None)
        return dict(r.json())

    def events(self, *events: tuple[int, int, str, int | None]) -> EventAcks:
        """(job_id, attempt, kind, exit_code) events in one batch, as an agent sends them."""
        body = {
            "events": [
                JobEventReport(
                    job_id=j,
                    attempt=a,
                    node=self.name,
                    kind=EventKind(k),
                    exit_code=c,
                    at=time.time(),
                ).model_dump(mode="json")
                for j, a, k, c in events
            ]
        }
        r = self.api.post("/api/v1/agent/events", headers=self.headers, json=body)
        assert r.status_code == 200, r.text
        return EventAcks.model_validate(r.json())

    def start(self, job_id: int, attempt: int) -> None:
        self.event(job_id, attempt, "started")

    def exit(self, job_id: int, attempt: int, code: int = 0, on_its_own: bool = False) -> None:
        self.event(job_id, attempt, "exited", exit_code=code, on_its_own=on_its_own)

    def log(self, job_id: int, attempt: int, *texts: str) -> None:
        now = time.time()
        first = self.next_seq.get((job_id, attempt), 0)
        self.next_seq[(job_id, attempt)] = first + len(texts)
        body = LogBatch(
            attempt=attempt,
            node=self.name,
            lines=[LogLine(seq=first + i, text=t, at=now) for i, t in enumerate(texts)],
        )
        r = self.api.post(
            f"/api/v1/agent/jobs/{job_id}/logs",
            headers=self.headers,
            json=body.model_dump(mode="json"),
        )
        assert r.status_code == 200, r.text
