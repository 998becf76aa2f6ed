"""`ThreadCalls`: the blocking calls made in one turn of the loop run in one
thread trip, in order, each caller getting its own result or error."""

from __future__ import annotations

import asyncio
import threading

import pytest

from schedulearn.agent.threadcalls import ThreadCalls


def test_calls_of_one_turn_share_one_trip_and_keep_their_own_results() -> None:
    ran: list[tuple[str, str]] = []

    def work(name: str) -> str:
        ran.append((name, threading.current_thread().name))
        if name == "bad":
            raise OSError("no such cgroup")
        return name.upper()

    async def scenario() -> tuple[list[object], int, int]:
        calls = ThreadCalls()
        first = await asyncio.gather(
            calls.call(work, "a"), calls.call(work, "bad"), calls.call(work, "c"),
            return_exceptions=True,
        )  # fmt: skip
        trips = calls.trips
        await calls.call(work, "later")  # a later turn: a trip of its own
        return list(first), trips, calls.trips

    first, trips, total = asyncio.run(scenario())
    assert first[0] == "A" and first[2] == "C"
    assert isinstance(first[1], OSError) and "no such cgroup" in str(first[1])
    assert (trips, total) == (1, 2)
    # In the order made, all three in one thread, and not the loop's.
    assert [name for name, _ in ran] == ["a", "bad", "c", "later"]
    assert len({thread for _, thread in ran[:3]}) == 1
    assert ran[0][1] != threading.main_thread().name


def test_a_cancelled_caller_does_not_disturb_the_others() -> None:
    gate = threading.Event()

    def slow() -> str:
        gate.wait(10)
        return "done"

    async def scenario() -> str:
        calls = ThreadCalls()
        gone = asyncio.ensure_future(calls.call(slow))
        kept = asyncio.ensure_future(calls.call(lambda: "kept"))
        await asyncio.sleep(0)
        gone.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await gone
        return await kept

    assert asyncio.run(scenario()) == "kept"
