"""The order in which similarity's matching (its step 3) walks its (job, GPU type)
pairs, found without sorting every pair (issue 36, item 2).

The matching walks every pair of a waiting job and a GPU type by key (the
job's saving there, negated), ascending, and among equal keys by job, then
type: one sort of all the pairs gives that order. The walk seldom goes far,
though: it stops once every type is full, and no more jobs can start than
GPUs are free; and once a type is full, none of its later pairs can start.
So `pairs(keys, heads, closed)` sorts each type's pairs on its own, a piece
at a time (`ascending`: about `heads[p]` of them first, the rest only if the
walk gets there), merges the types' orders with a small heap, and drops a
type the walk has put in `closed`. It yields exactly the pairs, in exactly
the order, of the one sort, less those of types closed before their turn.

Pure, standard library only; one `pairs` lives for one walk.
"""

from __future__ import annotations

from collections.abc import Iterator
from heapq import heapify, heappop, heapreplace
from itertools import chain, compress, repeat
from math import isnan
from operator import le, not_

# Below this many keys one sort is as cheap as the sample and the two scans.
_SMALL = 1024


def ascending(keys: list[float], head: int) -> Iterator[list[int]]:
    """The positions of `keys`, ascending by key and by position among equal keys
    (`sorted(range(len(keys)), key=keys.__getitem__)`), in at most two lists:
    about the `head` smallest first, then the rest. No key may be NaN."""
    n = len(keys)
    by_key = keys.__getitem__
    if n <= _SMALL or 2 * head >= n:
        yield sorted(range(n), key=by_key)
        return
    # A threshold near the head-th smallest key, read off a sample of every
    # step-th key (about 1,000 of them, sorted in C).
    step = max(1, n // 1024)
    sample = sorted(keys[::step])
    threshold = sample[min(len(sample) - 1, max(0, head) // step)]
    # Every key at or below the threshold, then every other one (scans in C). The
    # positions are ascending in each, so a stable sort by key keeps equal keys in
    # position order, as one sort of all of them would.
    low = list(map(le, keys, repeat(threshold)))
    yield sorted(compress(range(n), low), key=by_key)
    yield sorted(compress(range(n), map(not_, low)), key=by_key)


def pairs(keys: list[list[float]], heads: list[int], closed: set[int]) -> Iterator[tuple[int, int]]:
    """(job, type) pairs, by `keys[type][job]` ascending, then job, then type, leaving
    out every pair of a type in `closed` from when it is put there (the caller may
    close a type between two pairs). `heads[type]`: about how many of the type's
    pairs the walk may read (the rest are sorted only when it reads past them)."""
    if any(isnan(sum(row)) for row in keys):
        # A NaN key (or infinities of both signs: the sum cannot tell) orders nothing
        # consistently: then the one sort itself, so the order is exactly its own.
        width = len(keys)
        flat = [0.0] * (width * (len(keys[0]) if keys else 0))
        for p, row in enumerate(keys):
            flat[p::width] = row
        for at in sorted(range(len(flat)), key=flat.__getitem__):
            k, p = divmod(at, width)
            if p not in closed:
                yield k, p
        return
    streams = [
        chain.from_iterable(ascending(row, head)) for row, head in zip(keys, heads, strict=True)
    ]
    # (key, job, type): a tuple compares as the one sort orders the pairs.
    heap: list[tuple[float, int, int]] = []
    for p, stream in enumerate(streams):
        first = next(stream, None)
        if first is not None:
            heap.append((keys[p][first], first, p))
    heapify(heap)
    while heap:
        _, k, p = heap[0]
        if p in closed:
            heappop(heap)  # the type is full: none of its later pairs can start
            continue
        yield k, p
        after = next(streams[p], None)
        if after is None:
            heappop(heap)
        else:
            heapreplace(heap, (keys[p][after], after, p))
