"""`server.guard.ReadTurns`: at most `limit` reads are worked on at once.

An in-process ASGI app stands in for the server's routes: it counts how many
requests it works on at once and holds each for a few loop turns, as a
listing's rendering does.
"""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message, Receive, Scope, Send

from schedulearn.server.guard import ReadTurns


class Counting:
    """An ASGI app that records the most requests it worked on at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.done = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            for _ in range(5):
                await asyncio.sleep(0)
            if scope["path"] == "/fail":
                raise RuntimeError("the route failed")
            await send({"type": "http.response.start", "status": 200, "headers": []})
        finally:
            self.now -= 1
        await send({"type": "http.response.body", "body": b""})
        self.done += 1


def _scope(method: str, path: str = "/api/v1/jobs") -> Scope:
    return {"type": "http", "method": method, "path": path}


async def _noop_receive() -> Message:
    return {"type": "http.request", "body": b""}


async def _run(app: ReadTurns, scopes: list[Scope]) -> list[BaseException | None]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    return await asyncio.gather(
        *(app(s, _noop_receive, send) for s in scopes),
        return_exceptions=True,
    )


def test_reads_take_turns_up_to_the_limit() -> None:
    inner = Counting()
    asyncio.run(_run(ReadTurns(inner, limit=3), [_scope("GET") for _ in range(20)]))
    assert inner.most == 3


@pytest.mark.parametrize("scope", [_scope("POST"), _scope("GET", "/healthz")])
def test_writes_and_probes_do_not_wait_for_a_turn(scope: dict[str, object]) -> None:
    inner = Counting()
    asyncio.run(_run(ReadTurns(inner, limit=1), [dict(scope) for _ in range(10)]))
    assert inner.most == 10


def test_a_failed_read_gives_its_turn_back() -> None:
    inner = Counting()
    gate = ReadTurns(inner, limit=1)

    async def failures_then_one() -> list[BaseException | None]:
        failed = await _run(gate, [_scope("GET", "/fail") for _ in range(3)])
        return failed + await _run(gate, [_scope("GET")])

    # Had a failure kept its turn, the next read would wait forever.
    results = asyncio.run(asyncio.wait_for(failures_then_one(), 5))
    assert [type(r) for r in results] == [RuntimeError] * 3 + [type(None)]
    assert inner.done == 1
