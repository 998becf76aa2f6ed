"""The duration-estimate rule: progress, then the user's estimate, then history."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from schedulearn.server.services.durations import (
    DurationSource,
    History,
    JobFacts,
    command_key,
    estimate,
    fraction_done,
    from_progress,
)


def facts(**kw: Any) -> JobFacts:
    base: dict[str, object] = {
        "id": 1,
        "user": "ann",
        "name": "train",
        "command": ["python", "train.py"],
        "estimated_duration": None,
        "service_seconds": 0.0,
    }
    return JobFacts(**{**base, **kw})


@pytest.mark.parametrize(
    ("report", "fraction"),
    [
        ({"at": 1.0, "epoch": 2, "total_epochs": 10}, 0.2),
        ({"at": 1.0, "step": 50, "metrics": {"total_steps": 200.0}}, 0.25),
        ({"at": 1.0, "metrics": {"fraction": 0.5}}, 0.5),
        ({"at": 1.0, "epoch": 12, "total_epochs": 10}, 1.0),
        ({"at": 1.0, "step": 5}, None),  # no total: no fraction
        (0.4, 0.4),
        (None, None),
    ],
)
def test_fraction_done_reads_what_the_runtime_reports(
    report: object, fraction: float | None
) -> None:
    assert fraction_done(report) == fraction


def test_progress_extrapolates_only_past_two_percent() -> None:
    assert from_progress(100.0, {"epoch": 1, "total_epochs": 4}) == 400.0
    assert from_progress(1.0, {"epoch": 1, "total_epochs": 100}) is None
    assert from_progress(0.0, {"epoch": 1, "total_epochs": 4}) is None


def test_progress_beats_the_estimate_which_beats_history() -> None:
    history = History({("ann", "train"): [30.0, 50.0, 40.0]}, {})
    running = facts(
        estimated_duration=600.0, service_seconds=100.0, progress={"epoch": 1, "total_epochs": 2}
    )
    got = estimate(running, history)
    assert got is not None
    assert got.source is DurationSource.PROGRESS
    assert got.seconds == 200.0
    given = estimate(facts(estimated_duration=600.0), history)
    assert given is not None and (given.seconds, given.source) == (600.0, DurationSource.ESTIMATE)
    learned = estimate(facts(), history)
    assert learned is not None
    assert (learned.seconds, learned.source, learned.samples) == (40.0, DurationSource.HISTORY, 3)


def test_history_falls_back_to_the_same_command_and_never_invents() -> None:
    history = History({}, {command_key(["python", "train.py"]): [10.0, 20.0]})
    same_command = estimate(facts(name="other"), history)
    assert same_command is not None and same_command.seconds == 15.0
    assert estimate(facts(name="other", command="python eval.py"), history) is None
    assert estimate(facts(), None) is None


def test_the_time_limit_stands_in_last_and_bounds_every_figure() -> None:
    history = History({("ann", "train"): [300.0]}, {})
    # No estimate, no history: the limit, as the user's own figure.
    alone = estimate(facts(name="new", time_limit=900.0), history)
    assert alone is not None and (alone.seconds, alone.source) == (900.0, DurationSource.ESTIMATE)
    # A better figure wins while it is below the limit...
    learned = estimate(facts(time_limit=900.0), history)
    assert learned is not None and (learned.seconds, learned.source) == (300.0, "history")
    # ...and is cut to it when above: the job is stopped there.
    capped = estimate(facts(estimated_duration=5000.0, time_limit=900.0), history)
    assert capped is not None and capped.seconds == 900.0


def test_a_group_median_is_computed_once_for_every_job_that_looks_it_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A forecast looks up every queued job; a group (one name, one command) may
    # hold thousands of run times, sorted once, not once per job (issue 36).
    history = History({("ann", "train"): [30.0, 50.0, 40.0]}, {command_key("x"): [7.0, 9.0]})
    sorts: list[int] = []
    plain = statistics.median

    def counted(data: list[float]) -> float:
        sorts.append(len(data))
        return float(plain(data))

    monkeypatch.setattr(statistics, "median", counted)
    by_name = [estimate(facts(), history) for _ in range(50)]
    by_command = [estimate(facts(name="other", command="x"), history) for _ in range(50)]
    assert {e.seconds for e in by_name if e} == {40.0} and len(by_name) == 50
    assert {e.seconds for e in by_command if e} == {8.0}
    assert sorts == [3, 2]
