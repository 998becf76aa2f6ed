"""`core.dependencies` and its place in `core.eligibility`: afterok, afterany,
afternotok, array-aware; a job waits with a reason, or is doomed with one."""

from __future__ import annotations

from typing import Any

import pytest

from schedulearn.core import ClusterView, JobView, NodeView, Start, available, create
from schedulearn.core.dependencies import BadDependency, Outcome, canonical, named, parse, verdict
from schedulearn.core.eligibility import doomed, schedulable, set_aside

RUNNING = Outcome(tasks=1, ended=0, succeeded=0)
OK = Outcome(tasks=1, ended=1, succeeded=1)
FAILED = Outcome(tasks=1, ended=1, succeeded=0)


def _job(job_id: int, **kw: Any) -> JobView:
    return JobView(id=job_id, submitted_at=float(job_id), gpus=1, **kw)


def _view(pending: list[JobView], outcomes: dict[int, Outcome]) -> ClusterView:
    return ClusterView(
        now=100.0, nodes=(NodeView.new("n0", 8),), pending=tuple(pending), outcomes=outcomes
    )


def test_parse_reads_slurm_text_and_stores_it_canonical() -> None:
    deps = parse("afterok:12:13, afterany:14,afterok:12")
    assert [str(d) for d in deps] == ["afterok:12", "afterok:13", "afterany:14"]
    assert canonical("AFTEROK:12:13,afterany:14,afterok:15") == "afterok:12:13:15,afterany:14"
    assert named("afterok:12,afternotok:12:7") == (12, 7)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("after:12", "'after' is not a dependency kind; the kinds are afterok, afterany"),
        ("afterok", "'afterok' names no job"),
        ("afterok:x", "'x' in 'afterok:x' is not a job id"),
        ("afterok:0", "'0' in 'afterok:0' is not a job id"),
        (" , ", "the dependency is empty"),
    ],
)
def test_bad_text_says_what_to_write(text: str, says: str) -> None:
    with pytest.raises(BadDependency, match=r"write e\.g\. afterok:12") as caught:
        parse(text)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("text", "outcome", "met", "never", "reason"),
    [
        ("afterok:12", RUNNING, False, False, "waits for job 12 to succeed"),
        ("afterok:12", OK, True, False, ""),
        ("afterok:12", FAILED, False, True, "afterok:12 can never be met: job 12 did not succeed"),
        ("afterany:12", RUNNING, False, False, "waits for job 12 to end"),
        ("afterany:12", OK, True, False, ""),
        ("afterany:12", FAILED, True, False, ""),
        ("afternotok:12", RUNNING, False, False, "waits for job 12 to fail"),
        ("afternotok:12", FAILED, True, False, ""),
        ("afternotok:12", OK, False, True, "afternotok:12 can never be met: job 12 succeeded"),
    ],
)
def test_each_kind(text: str, outcome: Outcome, met: bool, never: bool, reason: str) -> None:
    v = verdict(text, {12: outcome})
    assert (v.met, v.never) == (met, never)
    assert reason in v.reason


def test_an_array_id_waits_for_every_task() -> None:
    some_done = Outcome(tasks=4, ended=3, succeeded=3, array=True)
    v = verdict("afterok:12", {12: some_done})
    assert not v.met and not v.never
    assert v.reason == "waits for every task of array 12 to succeed"
    assert verdict("afterok:12", {12: Outcome(4, 4, 4, array=True)}).met
    one_failed = verdict("afterok:12", {12: Outcome(4, 2, 1, array=True)})
    assert one_failed.never
    assert "1 task(s) of array 12 did not succeed" in one_failed.reason
    # afternotok on an array: once all have ended, one failure is enough.
    assert not verdict("afternotok:12", {12: Outcome(4, 2, 1, array=True)}).met
    assert verdict("afternotok:12", {12: Outcome(4, 4, 3, array=True)}).met


def test_every_dependency_must_hold_and_a_missing_job_dooms() -> None:
    v = verdict("afterok:12,afterany:13", {12: OK, 13: RUNNING})
    assert v.reason == "waits for job 13 to end"
    assert verdict("afterok:12,afterany:13", {12: OK, 13: FAILED}).met
    gone = verdict("afterok:99", {})
    assert gone.never and "job 99 does not exist" in gone.reason


def test_eligibility_sets_waiting_jobs_aside_and_names_the_doomed() -> None:
    pending = [
        _job(20, dependency="afterok:12"),
        _job(21, dependency="afterok:13"),
        _job(22, dependency="afterany:13"),
        _job(23),
    ]
    view = _view(pending, {12: RUNNING, 13: FAILED})
    assert set_aside(view) == {
        20: "waits for job 12 to succeed",
        21: "dependency afterok:13 can never be met: job 13 did not succeed",
    }
    assert doomed(view) == {21: "dependency afterok:13 can never be met: job 13 did not succeed"}
    assert [j.id for j in schedulable(view).pending] == [22, 23]


@pytest.mark.parametrize("spec", available())
def test_no_policy_starts_a_job_before_its_dependency_holds(spec: str) -> None:
    pending = [_job(20, dependency="afterok:12"), _job(21, dependency="afterany:12")]
    waiting = create(spec).decide(schedulable(_view(pending, {12: RUNNING})))
    assert not [d for d in waiting if isinstance(d, Start)]
    done = create(spec).decide(schedulable(_view(pending, {12: OK})))
    assert {d.job_id for d in done if isinstance(d, Start)} == {20, 21}
