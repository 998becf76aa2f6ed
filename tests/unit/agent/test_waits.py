"""`agent.waits.wait_set`: an event wait with a timeout, as `wait_for` gives it."""

from __future__ import annotations

import asyncio

import pytest

from schedulearn.agent.waits import wait_set


def test_set_before_during_and_never() -> None:
    async def go() -> None:
        event = asyncio.Event()
        assert await wait_set(event, 0.01) is False  # the time ran out
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, event.set)
        assert await wait_set(event, 30) is True  # set while waiting: no 30 s wait
        assert await wait_set(event, 0) is True  # set already

    asyncio.run(asyncio.wait_for(go(), timeout=10))


def test_a_cancel_from_outside_is_not_taken_for_the_timeout() -> None:
    """The waiting task, cancelled by someone else, stays cancelled."""

    async def go() -> None:
        event = asyncio.Event()
        waiter = asyncio.create_task(wait_set(event, 30))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert waiter.cancelled()

    asyncio.run(asyncio.wait_for(go(), timeout=10))
