"""The CLI's client given several server addresses (replicas): a refused
connection or a 503 on one sends the same request, with the same
Idempotency-Key, to the next at once; it then sticks to the one that works.

The servers are real HTTP servers on 127.0.0.1 (the standard library's),
scripted to answer given statuses and to record what they got.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from schedulearn.cli.client import IDEMPOTENCY_HEADER, Client
from schedulearn.cli.config import resolve
from schedulearn.cli.freeports import free_port
from schedulearn.protocol import JobSpec

REPLY = {"ids": [7], "jobs": []}


class Scripted(ThreadingHTTPServer):
    def __init__(self, statuses: list[int]) -> None:
        super().__init__(("127.0.0.1", free_port()), _Handler)
        self.statuses = statuses
        self.seen: list[dict[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Scripted

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.seen.append(dict(self.headers))
        status = self.server.statuses.pop(0) if self.server.statuses else 201
        body = json.dumps(REPLY if status == 201 else {"error": f"scripted {status}"}).encode()
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "30")  # a pause the test would notice
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(*servers: Scripted) -> Iterator[None]:
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_a_closed_first_address_fails_over_to_the_second_and_sticks() -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    live = Scripted([])
    with serving(live), Client(f"{closed},{live.url}", "t", retry_seconds=0) as client:
        # retry_seconds=0: no retry budget at all, so only the failover can save it.
        assert client.submit(JobSpec(command=["true"])).ids == [7]
        assert client.submit(JobSpec(command=["true"])).ids == [7]
        assert client.server == f"{closed},{live.url}"
    assert len(live.seen) == 2


def test_a_503_goes_to_the_next_replica_with_the_same_key_without_waiting() -> None:
    busy, fine = Scripted([503]), Scripted([])
    with serving(busy, fine), Client(f"{busy.url},{fine.url}", "t", retry_seconds=5) as client:
        # The 503 asks for 30 s, more than the 5 s budget: only an immediate
        # move to the next replica gets this through.
        assert client.submit(JobSpec(command=["true"])).ids == [7]
    assert len(busy.seen) == 1 and len(fine.seen) == 1
    assert busy.seen[0][IDEMPOTENCY_HEADER] == fine.seen[0][IDEMPOTENCY_HEADER]


def test_the_config_file_may_list_replicas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cli.json"
    path.write_text(json.dumps({"server": ["http://a:1/", "http://b:2"]}))
    monkeypatch.setenv("SCHEDULEARN_CONFIG", str(path))
    monkeypatch.delenv("SCHEDULEARN_SERVER", raising=False)
    assert resolve().server == "http://a:1,http://b:2"
    monkeypatch.setenv("SCHEDULEARN_SERVER", "http://c:3, http://d:4")
    assert resolve().server == "http://c:3,http://d:4"
    assert resolve("http://e:5").server == "http://e:5"
