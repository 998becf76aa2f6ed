"""Policy options are read as the types the policy declares; a bad value is refused
with a message that names the option and what it takes, for every built-in policy."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from schedulearn.core import create
from schedulearn.core.policy_options import PolicyOptionError, convert, describe
from schedulearn.core.registry import UnknownPolicyError, available, options_of, parse_spec

BUILT_IN = [(name, option) for name in available() for option in options_of(name)]


@pytest.mark.parametrize(("name", "option"), BUILT_IN)
def test_every_option_of_every_policy_refuses_nonsense_saying_what_it_takes(
    name: str, option: str
) -> None:
    with pytest.raises(UnknownPolicyError) as refused:
        create(f"{name}:{option}=nonsense?")
    said = str(refused.value)
    assert said.startswith(f"{name}:") or said.startswith(f"policy {name!r}"), said
    assert option in said and "'nonsense?'" in said, said
    assert " takes " in said or " must " in said, said  # says what it takes


@pytest.mark.parametrize(("name", "option"), BUILT_IN)
def test_every_option_takes_its_default_written_as_text(name: str, option: str) -> None:
    default = options_of(name)[option]
    text = str(default).lower() if isinstance(default, bool) else str(default)
    _, options = parse_spec(f"{name}:{option}={text}")
    assert options[option] == default


def test_values_are_typed_and_bad_ones_name_the_choices() -> None:
    assert parse_spec("fifo:backfill=yes")[1] == {"backfill": True}
    assert parse_spec("tiresias:queues=3:threshold=3600,7200")[1] == {
        "queues": 3,
        "threshold": "3600,7200",
    }
    assert parse_spec("tiresias:threshold=600")[1] == {"threshold": 600.0}
    with pytest.raises(PolicyOptionError, match="backfill takes true or false, not 'maybe'"):
        create("fifo:backfill=maybe")
    with pytest.raises(PolicyOptionError, match="quantum takes a number, not 'abc'"):
        create("timeslice:quantum=abc")
    with pytest.raises(PolicyOptionError, match=r"queues takes a whole number, not '2\.5'"):
        create("tiresias:queues=2.5")
    with pytest.raises(PolicyOptionError, match="takes a number, not 'inf'"):
        create("srtf:margin=inf")
    with pytest.raises(UnknownPolicyError, match="its options are: backfill=False"):
        create("fifo:nope=1")


def test_literal_and_union_types() -> None:
    mode = Literal["exact", "artifact"]
    assert convert("p", "mode", "artifact", mode) == "artifact"
    with pytest.raises(PolicyOptionError, match="mode takes one of exact, artifact, not 'x'"):
        convert("p", "mode", "x", mode)
    assert convert("p", "n", "4", int | None) == 4
    assert describe(float | str) == "a number or text"
    assert describe(float | None) == "a number or none"
    assert convert("p", "f", "None", float | None) is None
    anything: Any = Any
    assert convert("p", "x", "7", anything) == 7  # undeclared: guessed as before
