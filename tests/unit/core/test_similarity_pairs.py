"""Similarity's matching walks its (job, GPU type) pairs in the order of one sort of
them all, whether the pairs are sorted at once or a type and a piece at a time
(`core.policies._similarity_pairs`, issue 36 item 2)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from schedulearn.core.policies._similarity_pairs import ascending, pairs


def one_sort(keys: list[list[float]]) -> list[tuple[int, int]]:
    """The order the matching read before: every pair laid out at job * width +
    type, sorted by key alone (stable)."""
    width = len(keys)
    flat = [0.0] * (width * len(keys[0]))
    for p, row in enumerate(keys):
        flat[p::width] = row
    return [divmod(at, width) for at in sorted(range(len(flat)), key=flat.__getitem__)]


def walk(
    order: Iterator[tuple[int, int]], closed: set[int], close_at: dict[int, int]
) -> list[tuple[int, int]]:
    """Read `order`, closing type p after the close_at[p]-th pair read."""
    got = []
    for pair in order:
        got.append(pair)
        for p, at in close_at.items():
            if at == len(got):
                closed.add(p)
    return got


def reference(keys: list[list[float]], close_at: dict[int, int]) -> list[tuple[int, int]]:
    closed: set[int] = set()
    out = []
    for k, p in one_sort(keys):
        if p in closed:
            continue
        out.append((k, p))
        for q, at in close_at.items():
            if at == len(out):
                closed.add(q)
    return out


def rows(rng: random.Random, jobs: int, width: int, distinct: int) -> list[list[float]]:
    # Few distinct values: many equal keys, as jobs alike (or without an estimate) have.
    values = [rng.uniform(-1e4, 1e4) for _ in range(distinct)] + [0.0, -0.0]
    return [[rng.choice(values) for _ in range(jobs)] for _ in range(width)]


def test_the_pieces_hold_every_position_once_in_one_sorts_order() -> None:
    rng = random.Random(7)
    for n, distinct, head in ((5000, 40, 300), (3000, 3000, 1), (4000, 2, 100), (1500, 10, 700)):
        keys = rows(rng, n, 1, distinct)[0]
        pieces = list(ascending(keys, head))
        assert len(pieces) == 2  # large enough to be cut
        assert [i for piece in pieces for i in piece] == sorted(range(n), key=keys.__getitem__)
        assert len(pieces[0]) >= min(head, n) // 2  # the first piece is about head long


def test_a_short_list_or_a_large_head_is_one_sort() -> None:
    keys = [3.0, 1.0, 2.0, 1.0]
    assert list(ascending(keys, 1)) == [[1, 3, 2, 0]]
    long = [float(i % 7) for i in range(5000)]
    assert len(list(ascending(long, 2600))) == 1


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    jobs=st.integers(1, 1500),
    width=st.integers(1, 4),
    distinct=st.sampled_from([1, 3, 50, 100_000]),
    heads=st.lists(st.integers(0, 2000), min_size=4, max_size=4),
    closes=st.lists(st.integers(0, 3000), min_size=4, max_size=4),
)
def test_the_merged_walk_is_the_one_sort_less_the_closed_types(
    seed: int, jobs: int, width: int, distinct: int, heads: list[int], closes: list[int]
) -> None:
    keys = rows(random.Random(seed), jobs, width, distinct)
    close_at = {p: closes[p] for p in range(width) if closes[p]}
    closed: set[int] = set()
    got = walk(pairs(keys, heads[:width], closed), closed, close_at)
    assert got == reference(keys, close_at)


def test_large_rows_are_read_a_piece_at_a_time_in_the_same_order() -> None:
    rng = random.Random(36)
    keys = rows(rng, 10_000, 3, 500)
    close_at = {0: 40, 2: 900}
    closed: set[int] = set()
    got = walk(pairs(keys, [50, 50, 50], closed), closed, close_at)
    assert got == reference(keys, close_at)


def test_a_nan_key_walks_the_one_sorts_own_order() -> None:
    rng = random.Random(3)
    keys = rows(rng, 3000, 3, 30)
    keys[1][17] = math.nan
    keys[0][2500] = math.inf
    closed: set[int] = set()
    got = walk(pairs(keys, [10, 10, 10], closed), closed, {})
    assert got == one_sort(keys)
