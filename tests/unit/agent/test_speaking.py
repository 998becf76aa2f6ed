"""The agent's protocol state (`agent.speaking`): the header its calls carry,
what it leaves out for an older server (logged once), and how it reads a
refusal: the server changed since the probe (send again) or cannot be spoken to."""

from __future__ import annotations

import logging

import pytest

from schedulearn.agent.speaking import Speaking
from schedulearn.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION


def _speaking() -> tuple[Speaking, dict[str, str], dict[str, str]]:
    a, b = {PROTOCOL_HEADER: str(PROTOCOL_VERSION)}, {PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
    return Speaking(PROTOCOL_VERSION, (a, b)), a, b


def test_every_transport_speaks_the_servers_newest_version_when_it_is_older() -> None:
    speaking, a, b = _speaking()
    speaking.learn(1, 2)
    assert a[PROTOCOL_HEADER] == b[PROTOCOL_HEADER] == "2"
    speaking.learn(1, PROTOCOL_VERSION + 1)  # upgraded: back to this agent's own
    assert a[PROTOCOL_HEADER] == str(PROTOCOL_VERSION)


def test_a_refusal_with_a_new_range_is_sent_again_and_one_it_cannot_meet_stops() -> None:
    speaking, a, _ = _speaking()
    speaking.learn(1, PROTOCOL_VERSION)
    # Every reply carries the range: one that includes the version sent is no refusal.
    assert speaking.refused(400, f"1..{PROTOCOL_VERSION}") is None
    assert speaking.refused(404, None) is None
    # Downgraded since the probe: learn its range, send again.
    assert speaking.refused(400, "1..2") is False
    assert a[PROTOCOL_HEADER] == "2"
    # The same range refusing again, or a server too new for this agent: stop.
    assert speaking.refused(400, "3..3") is False  # changed again: one more try
    assert speaking.refused(400, f"{PROTOCOL_VERSION + 1}..{PROTOCOL_VERSION + 2}") is True


def test_fields_the_server_lacks_are_left_out_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    speaking, _, _ = _speaking()
    peer = speaking.learn(1, 1)
    event = {"job_id": 1, "attempt": 1, "kind": "exited", "on_its_own": True}
    with caplog.at_level(logging.WARNING, "schedulearn.agent.speaking"):
        for _ in range(3):
            _, content = speaking.judged(peer, "POST", "/events", None, {"events": [event]})
            assert content is not None and "on_its_own" not in content
    lines = [r.getMessage() for r in caplog.records if "not sent" in r.getMessage()]
    assert lines == ["not sent to the server of protocol 1: the field JobEventReport.on_its_own"]
