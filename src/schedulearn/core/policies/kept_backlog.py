"""What changed between two backlogs a host handed a policy, found in C.

A host that keeps its job views (the simulator) changes a few of them a
pass, so a policy that keeps its order of the backlog across passes
(`tiresias_waiting`, `srtf_ranks`) looks only at the part between the
views that are the same objects at both ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import compress, count
from operator import is_not

from schedulearn.core.views import JobView


def changed_middle(
    last: Sequence[JobView], pending: Sequence[JobView]
) -> tuple[dict[int, JobView], dict[int, JobView]]:
    """The views of `last` and of `pending` between their same ends, each by `id()`."""
    shorter = min(len(last), len(pending))
    head = _same_run(last, pending, shorter)
    tail = min(_same_run(reversed(last), reversed(pending), shorter), shorter - head)
    left = last[head : len(last) - tail]
    joined = pending[head : len(pending) - tail]
    return dict(zip(map(id, left), left, strict=True)), dict(
        zip(map(id, joined), joined, strict=True)
    )


def _same_run(a: Iterable[JobView], b: Iterable[JobView], most: int) -> int:
    """How many leading items of `a` and `b` (at most `most`, the shorter's
    length) are the same objects: a scan in C."""
    return next(compress(count(), map(is_not, a, b)), most)
