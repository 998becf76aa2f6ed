"""`agent.starts.StartGate`: a first burst of starts begins at once, the
rest at the gate's rate, and a quiet spell refills the burst. Its clock is
set by the test and its waits are recorded, not slept."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from schedulearn.agent.starts import StartGate


class Time:
    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(round(seconds, 6))


def start(gate: StartGate, n: int) -> None:
    async def go() -> None:
        for _ in range(n):
            async with gate.slot():
                pass

    asyncio.run(go())


def test_a_burst_begins_at_once_and_the_rest_at_the_rate() -> None:
    t = Time()
    gate = StartGate(per_second=10, burst=3, clock=t.clock, sleep=t.sleep)
    start(gate, 6)
    # Six starts at one instant: three at once, then one each 0.1 s.
    assert t.waits == [0.1, 0.2, 0.3]
    assert gate.started == 6


def test_a_quiet_spell_refills_the_burst() -> None:
    t = Time()
    gate = StartGate(per_second=10, burst=3, clock=t.clock, sleep=t.sleep)
    start(gate, 3)
    t.now += 0.1  # one token back
    start(gate, 2)
    assert t.waits == [0.1]
    t.now += 10.0  # long enough for the whole burst, and no more
    start(gate, 4)
    assert t.waits == [0.1, 0.1]


def test_a_burst_of_one_paces_every_start() -> None:
    t = Time()
    gate = StartGate(per_second=500, burst=1, clock=t.clock, sleep=t.sleep)
    start(gate, 4)
    assert t.waits == [0.002, 0.004, 0.006]


@pytest.mark.parametrize(
    "bad",
    [
        lambda: StartGate(burst=0),
        lambda: StartGate(per_second=0),
        lambda: StartGate(concurrency=0),
    ],
    ids=["burst", "rate", "concurrency"],
)
def test_a_gate_that_could_never_open_is_refused(bad: Callable[[], StartGate]) -> None:
    with pytest.raises(ValueError, match="start gate needs"):
        bad()
