"""Free GPUs per node for one policy pass, indexed so that a placement search on
1,000 nodes does not read every node (issue 36).

`FreeCounts` owns, for the nodes of one `FreePool` (by position):

- `counts`: free GPUs per node position (0 for an unhealthy node);
- `tally`: how many nodes have each free count, so the counts present are
  known without reading every node (`present`);
- `hint`: per free count, a position no node before which has that count
  (a lower bound, moved back by `set`): best fit's scans start there;
- per GPU type (built on the first search for a job that names one): the
  counts of that type's nodes, their positions, their tally and their hints,
  so such a search never reads the other types' nodes (`scope`);
- per tally, the counts it has nodes for, sorted (`present`): read by every
  search, so kept, and dropped by `set` when a count appears or vanishes.

The searches go by free count with `list.index`, a scan in C, instead of a
Python loop over every node. The pool changes a node's count through `set`
only. Pure and standard library only, like the rest of the core.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schedulearn.core.views import NodeView

# Free count -> how many nodes have it (entries may fall to 0).
Tally = dict[int, int]
# What a search reads: free counts, the node position of each (None: the
# counts are every node's, by position), their tally, and their hints (per
# free count, a position in these counts no earlier one of which has it).
Scope = tuple[list[int], list[int] | None, Tally, dict[int, int]]


class FreeCounts:
    """The free GPUs of every node of one pass, by position, with their indexes."""

    __slots__ = ("_at", "_kinds", "_nodes", "_present", "_scopes", "counts", "hint", "tally")

    def __init__(self, nodes: Sequence[NodeView], counts: list[int]) -> None:
        self._nodes = nodes
        self.counts = counts
        self.tally: Tally = Counter(counts)  # counted in C: the simulator builds one a pass
        self.hint: dict[int, int] = {}
        self._scopes: dict[str, Scope] | None = None
        self._at: list[int] = []  # node position -> its index in its type's lists
        self._kinds: list[str] = []  # node position -> its GPU type (read by `set`)
        # id(tally) -> (that tally, its counts with nodes, ascending); the tally is
        # held so that its id is not reused while the entry lives.
        self._present: dict[int, tuple[Tally, list[int]]] = {}

    def scope(self, gpu_type: str | None) -> Scope:
        """The counts a search for GPUs of `gpu_type` reads (every node's for None or '')."""
        if not gpu_type:
            return self.counts, None, self.tally, self.hint
        if self._scopes is None:
            scopes: dict[str, Scope] = {}
            for i, node in enumerate(self._nodes):
                kind = node.gpu_type
                mine, where, tally, _ = scopes.setdefault(kind, ([], [], {}, {}))
                assert where is not None
                self._at.append(len(mine))
                self._kinds.append(kind)
                mine.append(self.counts[i])
                where.append(i)
                tally[self.counts[i]] = tally.get(self.counts[i], 0) + 1
            self._scopes = scopes
        return self._scopes.get(gpu_type) or ([], [], {}, {})

    def present(self, least: int, tally: Tally | None = None) -> list[int]:
        """The free counts of `least` or more that some node has (of those `tally`
        counts; every node by default), ascending."""
        tally = self.tally if tally is None else tally
        got = self._present.get(id(tally))
        if got is None or got[0] is not tally:
            got = self._present[id(tally)] = (tally, sorted(c for c, n in tally.items() if n))
        counts = got[1]
        return counts[bisect_left(counts, least) :]

    def holding(self, gpus: int, start: int, stop: int) -> Iterator[int]:
        """Positions in [start, stop), ascending, of the nodes with at least `gpus`
        free GPUs (any node for 0 GPUs): a k-way merge of each count's positions."""
        if gpus <= 0:
            yield from range(start, stop)
            return
        counts = self.counts
        heads: list[tuple[int, int]] = []  # (next position, count)
        for k in self.present(gpus):
            try:
                heads.append((counts.index(k, start, stop), k))
            except ValueError:
                continue
        heapq.heapify(heads)
        while heads:
            i, k = heads[0]
            yield i
            try:
                heapq.heapreplace(heads, (counts.index(k, i + 1, stop), k))
            except ValueError:
                heapq.heappop(heads)

    def set(self, i: int, now: int) -> None:
        """Node position `i` has `now` free GPUs: keep every index in step."""
        counts, tally = self.counts, self.tally
        was = counts[i]
        if was == now:
            return  # every index already says so (a hint is at or before i)
        tally[was] -= 1
        counts[i] = now
        have = tally[now] = tally.get(now, 0) + 1
        if have == 1 or not tally[was]:
            self._present.pop(id(tally), None)  # a count appeared or vanished
        hint = self.hint
        if i < hint.get(now, 0):
            hint[now] = i
        if self._scopes is not None:
            mine, _, kinds, hints = self._scopes[self._kinds[i]]
            j = self._at[i]
            kinds[was] -= 1
            mine[j] = now
            have = kinds[now] = kinds.get(now, 0) + 1
            if have == 1 or not kinds[was]:
                self._present.pop(id(kinds), None)
            if j < hints.get(now, 0):
                hints[now] = j
