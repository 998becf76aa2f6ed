"""`agent.retry.Retry`, the agent's one retry loop: what it retries, how long it
waits, when it gives up, what it logs. Its pauses are recorded, not slept."""

from __future__ import annotations

import asyncio
import logging

import pytest

from schedulearn.agent.client import AuthRejected, Rejected, ServerUnavailable, until_acked
from schedulearn.agent.retry import Backoff, GaveUp, Retry, Stopped, Temporary


class Flaky:
    """Fails with each of `errors` in turn, then returns "done"."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


class Pauses:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def test_a_temporary_failure_is_retried_until_the_call_goes_through() -> None:
    call, pauses = Flaky(*[ServerUnavailable("down")] * 5), Pauses()
    assert asyncio.run(Retry("send x", sleep=pauses).run(call)) == "done"
    assert call.calls == 6
    assert len(pauses.delays) == 5


def test_pauses_double_from_first_up_to_the_cap_within_a_quarter_either_side() -> None:
    call, pauses = Flaky(*[Temporary()] * 8), Pauses()
    asyncio.run(Retry("send x", first=0.5, cap=4.0, sleep=pauses).run(call))
    nominal = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    for delay, expected in zip(pauses.delays, nominal, strict=True):
        assert 0.75 * expected <= delay <= 1.25 * expected


def test_a_success_starts_the_next_outage_from_the_first_pause() -> None:
    pauses = Pauses()
    retry = Retry("send x", first=1.0, cap=60.0, sleep=pauses)
    asyncio.run(retry.run(Flaky(Temporary(), Temporary(), Temporary())))
    asyncio.run(retry.run(Flaky(Temporary())))
    assert pauses.delays[2] >= 0.75 * 4.0  # the third pause of the first outage
    assert pauses.delays[3] <= 1.25 * 1.0  # the first of the second


def test_a_failure_that_cannot_pass_propagates_at_once() -> None:
    call, pauses = Flaky(Rejected(422, "bad"), ServerUnavailable("down")), Pauses()
    with pytest.raises(Rejected):
        asyncio.run(Retry("send x", sleep=pauses).run(call))
    assert (call.calls, pauses.delays) == (1, [])


def test_it_gives_up_after_its_tries_with_the_last_error() -> None:
    call = Flaky(ServerUnavailable("one"), ServerUnavailable("two"), ServerUnavailable("three"))
    with pytest.raises(GaveUp) as gave_up:
        asyncio.run(Retry("upload y", tries=2, sleep=Pauses()).run(call))
    assert call.calls == 2
    assert str(gave_up.value.last) == "two"
    assert "upload y: still failing after 2 tries (two)" in str(gave_up.value)


def test_what_is_retried_is_the_callers_choice() -> None:
    call, pauses = Flaky(Rejected(404, "not yet"), Rejected(404, "not yet")), Pauses()

    def not_found(exc: BaseException) -> bool:
        return isinstance(exc, Rejected) and exc.status == 404

    assert asyncio.run(Retry("get z", retryable=not_found, sleep=pauses).run(call)) == "done"
    assert call.calls == 3


def test_setting_stop_ends_the_retry_during_its_pause() -> None:
    call = Flaky(*[ServerUnavailable("down")] * 100)

    async def scenario() -> None:
        stop = asyncio.Event()
        # A one-hour pause: only the stop event can end it within the test's time.
        retry = Retry("register", first=3600.0, cap=3600.0, stop=stop)
        task = asyncio.create_task(retry.run(call))
        while call.calls == 0:
            await asyncio.sleep(0)
        stop.set()
        with pytest.raises(Stopped):
            await asyncio.wait_for(task, timeout=30)

    asyncio.run(scenario())
    assert call.calls == 1


def test_an_outage_is_warned_about_once_and_its_end_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="schedulearn.agent.retry")
    call = Flaky(*[ServerUnavailable("connection refused")] * 4)
    asyncio.run(Retry("send logs of job 7", sleep=Pauses()).run(call))
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "cannot send logs of job 7 yet (connection refused); retrying",
        "send logs of job 7: went through after retrying",
    ]


def test_until_acked_keeps_sending_and_gives_up_only_on_a_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Real pauses here (until_acked takes no sleep), but the first is a tenth of a second.
    assert asyncio.run(until_acked(Flaky(ServerUnavailable("down")), "an exit")) == "done"
    assert asyncio.run(until_acked(Flaky(Rejected(422, "old attempt")), "an exit")) is None
    assert "server refused an exit for good" in caplog.text
    with pytest.raises(AuthRejected):
        asyncio.run(until_acked(Flaky(AuthRejected(401, "unknown token")), "an exit"))


def test_a_backoff_refuses_limits_that_make_no_sense() -> None:
    with pytest.raises(ValueError, match="first <= cap"):
        Backoff(first=5.0, cap=1.0)
    with pytest.raises(ValueError, match="tries must be at least 1"):
        Retry("x", tries=0)
