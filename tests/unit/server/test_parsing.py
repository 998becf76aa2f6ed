"""Bounded body parsing: every limit refuses with a 400 naming it, before the
expensive step, and ordinary specs (aliases included) still parse."""

from __future__ import annotations

import json
import time

import pytest

from schedulearn.server.errors import BadRequest
from schedulearn.server.parsing import ParseLimits, json_depth, parse_sync

YAML = "application/yaml"


def alias_bomb(levels: int = 8, width: int = 9) -> str:
    """Each level lists the previous one `width` times: width**levels values from ~300 bytes."""
    lines = ['a0: &a0 ["x"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    lines.append(f"command: *a{levels}")
    return "\n".join(lines) + "\n"


def test_ordinary_specs_parse_in_both_forms() -> None:
    spec = {"command": ["python", "train.py"], "gpus": 2, "env": {"A": "1"}}
    assert parse_sync(json.dumps(spec).encode(), "application/json") == spec
    text = "command: [python, train.py]\ngpus: 2\nenv: {A: '1'}\n"
    assert parse_sync(text.encode(), "application/yaml; charset=utf-8") == spec


def test_a_few_yaml_aliases_are_still_allowed() -> None:
    text = "env: &e {A: '1'}\nname: x\ncommand: [echo]\nlabels: *e\n"
    assert parse_sync(text.encode(), YAML)["labels"] == {"A": "1"}


def test_alias_bomb_is_refused_quickly_naming_the_limit() -> None:
    bomb = alias_bomb()
    assert len(bomb) < 400
    started = time.perf_counter()
    with pytest.raises(BadRequest, match="expands to over 100000 values") as err:
        parse_sync(bomb.encode(), YAML)
    print(f"alias bomb refused in {time.perf_counter() - started:.4f} s")
    assert "alias" in err.value.message


def test_too_many_aliases_are_refused() -> None:
    text = "a: &a x\nb: [" + ", ".join(["*a"] * 101) + "]\n"
    with pytest.raises(BadRequest, match="over 100 aliases"):
        parse_sync(text.encode(), YAML)


def test_recursive_alias_is_refused() -> None:
    with pytest.raises(BadRequest, match="refers to itself"):
        parse_sync(b"a: &a [*a]\n", YAML)


@pytest.mark.parametrize("kind", ["application/json", YAML])
def test_deep_nesting_is_refused_naming_the_depth(kind: str) -> None:
    body = ("[" * 50_000 + "]" * 50_000).encode()
    with pytest.raises(BadRequest, match="over the limit of 32"):
        parse_sync(body, kind)


def test_nesting_at_the_limit_parses() -> None:
    limits = ParseLimits(max_depth=5)
    assert parse_sync(b"[[[[[1]]]]]", "application/json", limits) == [[[[[1]]]]]
    with pytest.raises(BadRequest, match="nests 6 levels"):
        parse_sync(b"[[[[[[1]]]]]]", "application/json", limits)
    with pytest.raises(BadRequest, match="nests 6 levels"):
        parse_sync(b"[[[[[[1]]]]]]", YAML, limits)


def test_size_caps_name_the_limit() -> None:
    limits = ParseLimits(max_bytes=100, max_yaml_bytes=50)
    with pytest.raises(BadRequest, match="over the 100-byte limit"):
        parse_sync(b" " * 101, "application/json", limits)
    with pytest.raises(BadRequest, match="YAML body is 51 bytes, over the 50-byte limit"):
        parse_sync(b" " * 51, YAML, limits)


@pytest.mark.parametrize(
    "value",
    [
        {"a": "[[[[", "b": [1, {"c": "]]]"}]},
        ["\\", [['\\"[{']]],
        {'k"[': [[[]]], "e": "\\\\"},
        "plain",
        [],
    ],
)
def test_json_depth_ignores_brackets_in_strings(value: object) -> None:
    def depth(v: object) -> int:
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        return 0

    assert json_depth(json.dumps(value).encode()) == depth(value)


def test_bad_syntax_is_a_400_saying_which_language() -> None:
    with pytest.raises(BadRequest, match="not valid JSON"):
        parse_sync(b"{", "application/json")
    with pytest.raises(BadRequest, match="not valid YAML"):
        parse_sync(b"a: [", YAML)
