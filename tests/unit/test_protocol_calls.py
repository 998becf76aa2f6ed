"""What a client of this release sends a server of an older protocol
(`protocol_calls.Peer`), judged against the checked-in wire files: calls the
server lacks are refused naming its version, options and fields it lacks are
left out when they hold their default, refused when set (the CLI), or left
out and listed (an agent's reports)."""

from __future__ import annotations

import pytest

from schedulearn.protocol import PROTOCOL_VERSION
from schedulearn.protocol_calls import NotKnown, Peer, parse_range, probe_range

NEWEST_2 = Peer(1, 2, PROTOCOL_VERSION, "CLI")


def test_the_probe_reads_the_range_or_takes_a_server_without_one_for_protocol_1() -> None:
    assert probe_range(200, "1..3") == (1, 3)
    assert probe_range(400, "2") == (2, 2)  # a server of one version
    assert probe_range(404, None) == (1, 1)  # 0.1.0: no probe, no header
    assert parse_range("three") is None and parse_range("3..1") is None


def test_a_server_of_this_version_gets_every_call_unchanged() -> None:
    peer = Peer(1, PROTOCOL_VERSION, PROTOCOL_VERSION, "CLI")
    body = {"command": ["x"], "queue": "research"}
    sent = peer.outgoing("POST", "/api/v1/jobs", {"anything": 1}, body)
    assert (sent.params, sent.body, peer.speak) == ({"anything": 1}, body, PROTOCOL_VERSION)


def test_a_call_the_older_server_lacks_is_refused_naming_its_version() -> None:
    assert NEWEST_2.speak == 2
    with pytest.raises(NotKnown) as refused:
        NEWEST_2.outgoing("GET", "/api/v1/queues/history")
    assert str(refused.value) == (
        "the server speaks protocol 1..2 and does not know GET /api/v1/queues/history, "
        f"which needs protocol 3 (this CLI speaks {PROTOCOL_VERSION}); upgrade the server to use it"
    )
    # Calls it knows pass, whatever their path holds.
    assert NEWEST_2.outgoing("POST", "/api/v1/jobs/17/cancel").body is None


def test_options_and_fields_the_server_lacks_are_left_out_at_their_default_or_refused() -> None:
    sent = NEWEST_2.outgoing("GET", "/api/v1/jobs", {"limit": 100, "order": "desc", "array": None})
    assert sent.params == {"limit": 100, "order": "desc"}
    with pytest.raises(NotKnown, match="does not know the option 'array' of GET /api/v1/jobs"):
        NEWEST_2.outgoing("GET", "/api/v1/jobs", {"array": 5})
    spec = {"command": ["python", "train.py"], "gpus": 2, "constraints": {}}
    assert NEWEST_2.outgoing("POST", "/api/v1/jobs", None, spec).body == {
        "command": ["python", "train.py"],
        "gpus": 2,
    }
    with pytest.raises(
        NotKnown, match=r"does not know the field JobSpec\.queue .*upgrade the server"
    ):
        NEWEST_2.outgoing("POST", "/api/v1/jobs", None, {**spec, "queue": "research"})


def test_an_agents_reports_leave_out_what_the_server_lacks_at_every_depth() -> None:
    agent = Peer(1, 1, PROTOCOL_VERSION, "agent")
    batch = {"events": [{"job_id": 1, "attempt": 1, "kind": "exited", "exit_code": 0,
                         "on_its_own": True}]}  # fmt: skip
    sent = agent.outgoing("POST", "/api/v1/agent/events", None, batch, lossy=True)
    assert sent.body == {"events": [{"job_id": 1, "attempt": 1, "kind": "exited", "exit_code": 0}]}
    assert sent.left_out == ["the field JobEventReport.on_its_own"]
    with pytest.raises(NotKnown, match="agent/join"):
        agent.outgoing("POST", "/api/v1/agent/join", None, {"join_token": "t"}, lossy=True)


def test_a_client_older_than_the_server_speaks_is_told_to_upgrade_itself() -> None:
    newer_server = Peer(PROTOCOL_VERSION + 1, PROTOCOL_VERSION + 2, PROTOCOL_VERSION, "agent")
    assert newer_server.refusal() == (
        f"this agent speaks protocol {PROTOCOL_VERSION}, the server speaks "
        f"{PROTOCOL_VERSION + 1}..{PROTOCOL_VERSION + 2}; upgrade the agent"
    )
