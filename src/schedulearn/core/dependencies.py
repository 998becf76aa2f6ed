"""Job dependencies (`submit --dependency afterok:12:13,afterany:14`): the
one rule, for the live scheduler and anything else that builds a `ClusterView`.

The text is Slurm's: `KIND:ID[:ID...]`, several joined by `,`, all of which
must hold. Kinds:

- `afterok`: every named job succeeded;
- `afterany`: every named job ended, however;
- `afternotok`: every named job ended, and did not succeed (failed,
  cancelled, timed out).

An id that is a job array's id (its first task's) stands for every task of
the array: `afterok:ARRAY` waits for all of them. The host summarises each
named id as an `Outcome` (how many tasks, how many ended, how many of those
succeeded) in `ClusterView.outcomes`; `verdict` then says whether a job may
start, must wait (with the reason `show` prints), or can never start (Slurm's
DependencyNeverSatisfied, made explicit: the host cancels it with that reason).
Standard library only; no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    AFTEROK = "afterok"
    AFTERANY = "afterany"
    AFTERNOTOK = "afternotok"


# What a job waits for under each kind, for its reason.
_WAITS_FOR = {Kind.AFTEROK: "succeed", Kind.AFTERANY: "end", Kind.AFTERNOTOK: "fail"}


class BadDependency(ValueError):
    """A dependency text that does not parse; the message says what to write."""


@dataclass(frozen=True, slots=True)
class Dependency:
    kind: Kind
    job_id: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.job_id}"


_EXAMPLE = "write e.g. afterok:12 or afterok:12:13,afterany:14"


def parse(text: str) -> tuple[Dependency, ...]:
    """`afterok:12:13,afterany:14` -> its dependencies, in order, each once."""
    found: list[Dependency] = []
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise BadDependency(f"the dependency is empty; {_EXAMPLE}")
    for part in parts:
        kind_text, _, ids = part.partition(":")
        try:
            kind = Kind(kind_text.strip().lower())
        except ValueError:
            valid = ", ".join(k.value for k in Kind)
            raise BadDependency(
                f"{kind_text.strip()!r} is not a dependency kind; "
                f"the kinds are {valid} ({_EXAMPLE})"
            ) from None
        if not ids.strip():
            raise BadDependency(f"{part!r} names no job; {_EXAMPLE}")
        for one in ids.split(":"):
            one = one.strip()
            if not one.isdigit() or int(one) <= 0:
                raise BadDependency(f"{one!r} in {part!r} is not a job id; {_EXAMPLE}")
            dep = Dependency(kind, int(one))
            if dep not in found:
                found.append(dep)
    return tuple(found)


def canonical(text: str) -> str:
    """The stored form: kinds grouped in the order given, `afterok:12:13,afterany:14`."""
    groups: dict[Kind, list[str]] = {}
    for dep in parse(text):
        groups.setdefault(dep.kind, []).append(str(dep.job_id))
    return ",".join(f"{kind}:{':'.join(ids)}" for kind, ids in groups.items())


def named(text: str | None) -> tuple[int, ...]:
    """The job ids `text` names (none for None)."""
    return tuple(dict.fromkeys(d.job_id for d in parse(text))) if text else ()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a named id: its tasks (1 for a plain job), how many have
    ended, how many of those succeeded. `array`: the id is an array's."""

    tasks: int
    ended: int
    succeeded: int
    array: bool = False

    @property
    def failed(self) -> int:
        return self.ended - self.succeeded


@dataclass(frozen=True, slots=True)
class Verdict:
    """`met`: may start. Otherwise `reason` says why it waits, or, when `never`,
    why it can never start."""

    met: bool
    never: bool = False
    reason: str = ""


MET = Verdict(met=True)


def _what(dep: Dependency, outcome: Outcome | None) -> str:
    if outcome is not None and outcome.array:
        return f"every task of array {dep.job_id}"
    return f"job {dep.job_id}"


def _never(dep: Dependency, outcome: Outcome) -> str | None:
    """Why `dep` can never hold, or None while it still may."""
    what = _what(dep, outcome)
    if dep.kind is Kind.AFTEROK and outcome.failed:
        if outcome.array:
            return f"{outcome.failed} task(s) of array {dep.job_id} did not succeed"
        return f"job {dep.job_id} did not succeed"
    if dep.kind is Kind.AFTERNOTOK and outcome.ended == outcome.tasks and not outcome.failed:
        return f"{what} succeeded"
    return None


def _holds(dep: Dependency, outcome: Outcome) -> bool:
    if outcome.ended < outcome.tasks:
        return False
    if dep.kind is Kind.AFTEROK:
        return outcome.succeeded == outcome.tasks
    if dep.kind is Kind.AFTERNOTOK:
        return outcome.failed > 0
    return True


def verdict(text: str | None, outcomes: Mapping[int, Outcome]) -> Verdict:
    """Whether a job with dependency `text` may start, given what became of the
    jobs it names (an id missing from `outcomes` is a job that does not exist)."""
    if not text:
        return MET
    waiting: Verdict | None = None
    for dep in parse(text):
        outcome = outcomes.get(dep.job_id)
        if outcome is None or outcome.tasks == 0:
            return Verdict(
                met=False,
                never=True,
                reason=f"dependency {dep} can never be met: job {dep.job_id} does not exist",
            )
        why = _never(dep, outcome)
        if why is not None:
            return Verdict(
                met=False, never=True, reason=f"dependency {dep} can never be met: {why}"
            )
        if waiting is None and not _holds(dep, outcome):
            waiting = Verdict(
                met=False, reason=f"waits for {_what(dep, outcome)} to {_WAITS_FOR[dep.kind]}"
            )
    return waiting or MET
