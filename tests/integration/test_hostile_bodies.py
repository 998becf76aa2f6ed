"""Hostile request bodies never stall the server (issue 14, item 1), against a
real server process: a YAML alias bomb and deeply nested JSON get a 400 that
names the limit, and a slow-to-parse body is parsed off the event loop, so
/healthz keeps answering while it is read.

Timings are printed, not asserted (the machine is shared); what is asserted
is behaviour that cannot hold if parsing ran on the loop: /healthz calls
that start and finish while the slow body is being parsed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from served import Served

YAML = {"content-type": "application/yaml"}


def alias_bomb(levels: int = 8, width: int = 9) -> bytes:
    """9**8 = 43 million values from about 300 bytes (the issue's bomb)."""
    lines = ['a0: &a0 ["x"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    lines.append(f"command: *a{levels}")
    return ("\n".join(lines) + "\n").encode()


def slow_yaml() -> bytes:
    """A spec under the 128 KiB YAML cap that takes a while to parse and validate,
    and is then refused for a bad `gpus` (so the reply is small and quick)."""
    env = "".join(f"  K{i}: v{i}\n" for i in range(8000))
    body = ("command: [echo, hi]\ngpus: -1\nenv:\n" + env).encode()
    assert len(body) < 128 * 1024
    return body


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[Served]:
    served = Served(database_url, tmp_path / "server.log").start()
    try:
        yield served
    finally:
        served.stop()


class HealthPoller:
    """Calls /healthz back to back on its own thread; records (start, end, status)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.calls: list[tuple[float, float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as http:
            while not self._stop.is_set():
                started = time.monotonic()
                status = http.get(f"{self.url}/healthz").status_code
                self.calls.append((started, time.monotonic(), status))
                time.sleep(0.005)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def within(self, start: float, end: float) -> list[float]:
        """Latencies of the 200s that started and ended inside [start, end]."""
        return [b - a for a, b, s in self.calls if s == 200 and start <= a and b <= end]


def test_yaml_bomb_gets_a_400_naming_the_limit_and_healthz_keeps_answering(
    server: Served,
) -> None:
    with server.client() as http, HealthPoller(server.url) as health:
        time.sleep(0.2)  # the poller is running before the bomb goes
        replies = []
        for _ in range(5):
            started = time.monotonic()
            reply = http.post("/api/v1/jobs", content=alias_bomb(), headers=YAML)
            replies.append((reply, time.monotonic() - started))
        time.sleep(0.1)
    for reply, _took in replies:
        assert reply.status_code == 400, reply.text
        assert "expands to over 100000 values" in reply.json()["error"]
    assert all(s == 200 for _, _, s in health.calls)
    latencies = [b - a for a, b, _ in health.calls]
    print(
        f"\nbomb 400s in {', '.join(f'{t * 1000:.0f}' for _, t in replies)} ms "
        f"(issue 14 goal: < 1000 ms); /healthz: {len(latencies)} calls, "
        f"max {max(latencies) * 1000:.0f} ms (goal: < 100 ms)"
    )


def test_a_slow_body_is_parsed_off_the_event_loop(server: Served) -> None:
    with server.client() as http, HealthPoller(server.url) as health:
        time.sleep(0.2)
        started = time.monotonic()
        reply = http.post("/api/v1/jobs", content=slow_yaml(), headers=YAML)
        ended = time.monotonic()
        time.sleep(0.1)
    # Refused by validation, which runs after the whole body is parsed.
    assert reply.status_code == 422, reply.text
    assert "gpus" in reply.json()["error"]
    during = health.within(started, ended)
    print(
        f"\nslow YAML answered in {(ended - started) * 1000:.0f} ms; {len(during)} /healthz "
        f"calls inside it, max {max(during, default=0) * 1000:.0f} ms"
    )
    # On the loop, the parse (most of the request's time) would hold every
    # /healthz that arrives meanwhile for about that long: measured 1.1 s of
    # a 1.3 s request. Off the loop each call waits for a GIL slice only.
    # The bound is relative to the request's own time, so a slow machine
    # slows both sides alike.
    assert len(during) >= 2, (ended - started, health.calls[-20:])
    assert max(during) < (ended - started) / 2, (ended - started, during)


def test_deeply_nested_json_gets_a_400_not_a_500(server: Served) -> None:
    body = b'{"command": ["x"], "env": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with server.client() as http:
        reply = http.post(
            "/api/v1/jobs", content=body, headers={"content-type": "application/json"}
        )
    assert reply.status_code == 400, reply.text
    assert "over the limit of 32" in reply.json()["error"]
