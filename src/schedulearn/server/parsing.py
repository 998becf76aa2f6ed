"""Bounded parsing of request bodies (JSON and YAML), off the event loop.

A body is parsed under `ParseLimits`: its size, how deeply it nests, how
many values it holds once YAML aliases are expanded, how many aliases it
uses, and how long parsing may take. A body over any limit is refused
with a `BadRequest` that names the limit and what to change, before the
expensive step: a YAML alias bomb (a few hundred bytes that expand to
tens of millions of values) is refused after composing its small node
graph, never expanded, and deep nesting never reaches a recursive parser
(JSON's C scanner or PyYAML's composer) far enough to raise RecursionError.

`parse_body` runs the parse in a worker thread under a time bound, so a
slow body never holds the event loop (heartbeats, /healthz) while it is
read; only a small JSON body (`inline_bytes`), which cannot be slow, is
parsed on the loop, since the hop to a thread would cost it more than
parsing does. This module owns no state.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from schedulearn.server.errors import BadRequest

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


@dataclass(frozen=True, slots=True)
class ParseLimits:
    """What one request body may hold. The defaults are far above any real job spec."""

    max_bytes: int = 1024 * 1024
    # YAML nodes are composed in Python (the C composer recurses without a
    # bound), so its cap is lower: 128 KiB parses in about half a second.
    max_yaml_bytes: int = 128 * 1024
    max_depth: int = 32
    max_values: int = 100_000  # after expanding YAML aliases
    max_aliases: int = 100
    timeout_seconds: float = 2.0
    # JSON cannot expand, so its size bounds its parse: one this small parses
    # and validates in well under a millisecond, on the loop.
    inline_bytes: int = 16 * 1024


DEFAULT_LIMITS = ParseLimits()


def is_yaml(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() in YAML_TYPES


T = TypeVar("T")


async def parse_body(
    body: bytes,
    content_type: str,
    then: Callable[[Any], T] = lambda value: value,
    limits: ParseLimits = DEFAULT_LIMITS,
) -> T:
    """`then(value)` for the value a JSON or YAML body holds, parsed within the limits.

    Parsing and `then` (validation into a model, which walks every value)
    run in a worker thread under the time bound, never on the event loop,
    but for a JSON body of at most `inline_bytes`.
    """
    if len(body) <= limits.inline_bytes and not is_yaml(content_type):
        return then(parse_json(body, limits))
    task = asyncio.to_thread(lambda: then(parse_sync(body, content_type, limits)))
    try:
        return await asyncio.wait_for(task, limits.timeout_seconds)
    except TimeoutError:
        # The thread finishes on its own (the other limits bound it); the
        # caller is answered now.
        raise BadRequest(
            f"the body took over {limits.timeout_seconds:g} s to parse; send a simpler one"
        ) from None


def parse_sync(body: bytes, content_type: str, limits: ParseLimits = DEFAULT_LIMITS) -> Any:
    """`parse_body` without the thread (blocking): for callers already off the loop."""
    if is_yaml(content_type):
        return parse_yaml(body, limits)
    return parse_json(body, limits)


def parse_json(body: bytes, limits: ParseLimits = DEFAULT_LIMITS) -> Any:
    _check_size(body, limits.max_bytes, "JSON")
    depth = json_depth(body)
    if depth > limits.max_depth:
        raise BadRequest(_too_deep(depth, limits))
    try:
        return json.loads(body or b"null")
    except ValueError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')


def json_depth(body: bytes) -> int:
    """How deeply arrays and objects nest in `body` (brackets inside strings not counted).

    A linear scan that does not need valid JSON: it runs before the parser,
    which recurses once per level.
    """
    # Escaped backslashes, then escaped quotes, cannot end a string: drop them;
    # then only quotes and brackets matter, so drop every other byte (in C) and
    # the Python loop sees a fraction of the body.
    kept = body.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    depth = deepest = 0
    in_string = False
    for byte in kept:
        if byte == 0x22:  # "
            in_string = not in_string
        elif in_string:
            continue
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def parse_yaml(body: bytes, limits: ParseLimits = DEFAULT_LIMITS) -> Any:
    _check_size(body, limits.max_yaml_bytes, "YAML")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"the body is not valid YAML: not UTF-8 ({exc})") from None
    loader = _BoundedLoader(text, limits)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded(node, limits)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise BadRequest(f"the body is not valid YAML: {exc}") from None
    finally:
        loader.dispose()


try:
    # libyaml's parser (C) makes the events; PyYAML's composer (Python, so it
    # can count) makes the nodes: as fast as the C loader, and bounded.
    from yaml._yaml import CParser as _Parser
except ImportError:  # PyYAML built without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser):  # type: ignore[no-redef]  # stands in for CParser above
        def __init__(self, text: str) -> None:
            Reader.__init__(self, text)
            Scanner.__init__(self)
            Parser.__init__(self)


class _BoundedLoader(Composer, _Parser, SafeConstructor, Resolver):
    """A safe YAML loader counting depth and aliases while it composes nodes."""

    def __init__(self, text: str, limits: ParseLimits) -> None:
        _Parser.__init__(self, text)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._limits = limits
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > self._limits.max_aliases:
                raise BadRequest(
                    f"the YAML body uses over {self._limits.max_aliases} aliases (*name); "
                    "write the values out instead"
                )
        self._depth += 1
        try:
            if self._depth > self._limits.max_depth:
                raise BadRequest(_too_deep(self._depth, self._limits))
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_expanded(root: Node, limits: ParseLimits) -> None:
    """Refuse a node graph whose aliases would expand past `max_values` (or loop).

    Each node's expanded size is computed once (shared nodes are what aliases
    make), so this is linear in the size of the graph, not of its expansion.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    # Iterative post-order walk: (node, children visited?)
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _children(node))
            if total > limits.max_values:
                raise BadRequest(
                    f"the body expands to over {limits.max_values} values (YAML aliases "
                    "repeat what they name); write a smaller spec"
                )
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise BadRequest("the YAML body refers to itself (a recursive alias); remove it")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    assert isinstance(node, ScalarNode)
    return []


def _check_size(body: bytes, limit: int, kind: str) -> None:
    if len(body) > limit:
        raise BadRequest(
            f"the {kind} body is {len(body)} bytes, over the {limit}-byte limit for a job spec; "
            "send a smaller one"
        )


def _too_deep(depth: int, limits: ParseLimits) -> str:
    return f"the body nests {depth} levels deep, over the limit of {limits.max_depth}; flatten it"
