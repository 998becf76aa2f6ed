"""`schedulearn.failover`: parsing a list of server addresses, and the
rotation the agent's and the CLI's clients share (sticky to the address
that works, next one on a failure, back off once all have failed)."""

from __future__ import annotations

import pytest

from schedulearn.failover import Rotation, ServerListError, parse_servers

A, B, C = "http://a:8642", "http://b:8642", "https://c"


def test_addresses_come_comma_separated_repeated_or_both() -> None:
    assert parse_servers("http://a:8642/, http://b:8642") == (A, B)
    assert parse_servers([A, f"{B},{C}/"]) == (A, B, C)
    assert parse_servers(f"{A},{A},{B}") == (A, B)  # a repeat is dropped, order kept


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("", "no server address given"),
        (" , ", "no server address given"),
        ("a:8642", "must look like http://host:8642"),
        ("ftp://a", "must look like http://host:8642"),
        ("http://a:port", "bad port"),
    ],
)
def test_a_bad_list_says_what_to_change(given: str, says: str) -> None:
    with pytest.raises(ServerListError, match=says):
        parse_servers(given)


def test_it_sticks_to_the_address_that_works() -> None:
    rotation = Rotation((A, B, C))
    assert rotation.current == A
    assert rotation.failed() is False
    assert rotation.current == B
    rotation.succeeded()
    # Later failures start counting afresh from the address that worked.
    assert rotation.failed() is False and rotation.current == C
    assert rotation.failed() is False and rotation.current == A
    assert rotation.failed() is True and rotation.current == B  # all three in a row


def test_back_off_once_per_round_and_every_time_with_one_address() -> None:
    rotation = Rotation((A, B))
    assert [rotation.failed() for _ in range(6)] == [False, True] * 3
    single = Rotation((A,))
    assert [single.failed() for _ in range(3)] == [True, True, True]
    assert single.current == A


def test_a_stale_failure_does_not_move_it_on_again() -> None:
    # Two requests failed on A at once: the first moves to B, the second must
    # not move back to A (it tries B instead).
    rotation = Rotation((A, B))
    assert rotation.failed(A) is False and rotation.current == B
    assert rotation.failed(A) is False and rotation.current == B
    assert rotation.failed(B) is True and rotation.current == A


def test_no_addresses_is_refused() -> None:
    with pytest.raises(ServerListError):
        Rotation(())
