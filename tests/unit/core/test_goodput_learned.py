"""goodput's learned-estimates path (issue 34): the host says when a job's remaining work
is a learned estimate, and a pass with one weighs every job with `fairness_learned`."""

from __future__ import annotations

import pytest

from schedulearn.core import create
from schedulearn.core.goodput import GoodputReport, JobGoodput

LIMITS = {"init_batch": 32, "max_batch": 256, "min_local_batch": 8, "max_local_batch": 64}


def report(progress: float, target: float | None = None) -> GoodputReport:
    return GoodputReport(**LIMITS, batch_size=32, local_batch=32, progress=progress, target=target)


def test_a_learned_estimate_is_marked_and_a_declared_total_is_not() -> None:
    learned = JobGoodput.of_report(report(100.0), (), 0, estimate=400.0)
    assert (learned.remaining, learned.estimated) == (300.0, True)
    declared = JobGoodput.of_report(report(100.0, target=500.0), (), 0, estimate=400.0)
    assert (declared.remaining, declared.estimated) == (400.0, False)
    # Past its estimate a job's remaining work is unknown, not estimated.
    past = JobGoodput.of_report(report(450.0), (), 0, estimate=400.0)
    assert (past.remaining, past.estimated) == (None, False)
    assert not JobGoodput.of_report(report(100.0), (), 0).estimated


def test_fairness_learned_is_an_option_in_the_unit_range() -> None:
    assert create("goodput").fairness_learned == 0.1  # type: ignore[attr-defined]
    assert create("goodput:fairness_learned=0.3").fairness_learned == 0.3  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="fairness_learned"):
        create("goodput:fairness_learned=1.5")
