"""The CLI's client under a server that is unavailable for a while: it tries a
503 again (after Retry-After) with the same Idempotency-Key, retries a
connection that was refused when given replicas (and gives up at once,
naming the address, when given one), and gives up on other errors at once.

The server here is a real HTTP server on 127.0.0.1 (the standard library's),
scripted to answer a given sequence of statuses and to record what it got.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from schedulearn.cli.client import IDEMPOTENCY_HEADER, ApiError, Client
from schedulearn.cli.freeports import free_port
from schedulearn.protocol import JobSpec

REPLY = {"ids": [7], "jobs": []}


class Scripted(ThreadingHTTPServer):
    def __init__(self, port: int, statuses: list[int]) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.statuses = statuses
        self.seen: list[dict[str, str]] = []


class _Handler(BaseHTTPRequestHandler):
    server: Scripted

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.seen.append(dict(self.headers))
        status = self.server.statuses.pop(0) if self.server.statuses else 201
        body = json.dumps(REPLY if status == 201 else {"error": f"scripted {status}"}).encode()
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "0")
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve(server: Scripted) -> Iterator[Scripted]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def port() -> int:
    return free_port()


def test_a_503_is_tried_again_with_the_same_idempotency_key(port: int) -> None:
    for server in serve(Scripted(port, [503, 503])):
        with Client(f"http://127.0.0.1:{port}", "t", retry_seconds=30) as client:
            assert client.submit(JobSpec(command=["true"])).ids == [7]
        keys = [seen[IDEMPOTENCY_HEADER] for seen in server.seen]
        assert len(keys) == 3 and len(set(keys)) == 1 and keys[0]


def test_each_submission_gets_its_own_key(port: int) -> None:
    for server in serve(Scripted(port, [])):
        with Client(f"http://127.0.0.1:{port}", "t") as client:
            client.submit(JobSpec(command=["true"]))
            client.submit(JobSpec(command=["true"]))
        assert len({seen[IDEMPOTENCY_HEADER] for seen in server.seen}) == 2


def test_a_refused_connection_is_tried_until_a_replica_is_up(port: int) -> None:
    other = f"http://127.0.0.1:{free_port()}"  # never up
    replies: list[list[int]] = []
    with Client(f"{other},http://127.0.0.1:{port}", "t", retry_seconds=60) as client:
        thread = threading.Thread(
            target=lambda: replies.append(client.submit(JobSpec(command=["true"])).ids)
        )
        thread.start()  # nothing listens on either port yet: refused
        for late in serve(Scripted(port, [])):
            thread.join(timeout=60)
            assert replies == [[7]]
            assert len(late.seen) == 1


def test_one_address_that_refuses_fails_at_once_naming_it(port: int) -> None:
    # A retry budget that would keep it trying for a minute on a replica list:
    # with one address there is nothing to fail over to (issue 35).
    with Client(f"http://127.0.0.1:{port}", "t", retry_seconds=60) as client:
        failed: list[ApiError] = []

        def submit() -> None:
            try:
                client.submit(JobSpec(command=["true"]))
            except ApiError as exc:
                failed.append(exc)

        thread = threading.Thread(target=submit)
        thread.start()  # nothing listens on the port: refused
        thread.join(timeout=30)  # it must not still be trying when the server comes up
        for late in serve(Scripted(port, [])):
            thread.join(timeout=60)
            assert len(failed) == 1, "gave up only once a server was there"
            assert f"cannot reach the server at http://127.0.0.1:{port} " in failed[0].message
            assert late.seen == []


def test_other_errors_and_a_spent_budget_fail_at_once(port: int) -> None:
    for server in serve(Scripted(port, [409, 503, 503, 503])):
        with Client(f"http://127.0.0.1:{port}", "t", retry_seconds=0) as client:
            with pytest.raises(ApiError) as conflict:
                client.submit(JobSpec(command=["true"]))
            assert conflict.value.status == 409
            with pytest.raises(ApiError) as unavailable:
                client.submit(JobSpec(command=["true"]))
            assert unavailable.value.status == 503
        assert len(server.seen) == 2
