"""The work a job has left, as the live `goodput` policy may know it: the information rule.

A goodput-aware policy weighs each job by the work it has left
(`core.goodput.JobGoodput.remaining`, in steps at the job's initial
batch). Live, the server hands it only what a running system can know,
from two sources, and nothing else about a job's length:

1. **declared**: the total the job itself declared and its runtime
   reports through `runtime.report()`: in steps at the initial batch
   (`AdaptiveBatch(target=...)`, sent as `GoodputReport.target`), what is
   left is `target - progress`; or as epochs or steps (`report(epoch=e,
   total_epochs=n)`, `step=` with a `total_steps=` keyword, or a
   `fraction=` keyword, read as `services.durations` reads them), the
   fraction `f` done, once at least 2% of it: what is left is
   `progress * (1 - f) / f`, the rest of the declared total at the
   progress per epoch (or step) the job made so far;
2. **learned**: for a job that declared no total, an estimate learned
   online from jobs that already ended, the kind of estimate the
   predictions use (`services.durations`' history): the median of the
   totals reached (the final `GoodputReport.progress`) by the same
   user's latest (`WINDOW`) succeeded jobs of the same name, or else of
   the same command, at the same initial batch; what is left is that
   median minus the progress so far, while the job is short of it;
3. otherwise **unknown** (None): the policy gets no remaining work and
   treats the job as one of unknown length (`core.policies.goodput`).

A job that has run past its learned total is unknown again, not about to
end: the estimate has been shown wrong for it. Neither the job's own
future nor any figure the server could not have learnt (in the simulator:
the trace's truth) reaches the policy this way; the simulator keeps the
same rule on its side (`sim/`).

Reads only: one query, and only when some job needs a learned total.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import select
from sqlmodel import Session, col

from schedulearn.core.goodput import GoodputReport
from schedulearn.protocol import JobState
from schedulearn.server.models import Job
from schedulearn.server.services.durations import (
    MIN_FRACTION,
    command_key,
    fraction_done,
)

# The latest succeeded jobs of the users concerned that totals are learnt from: read
# on scheduler passes (not only by forecasts, as `durations`' history is), so fewer.
WINDOW = 500


class WorkSource(StrEnum):
    DECLARED = "declared"
    LEARNED = "learned"


@dataclass(frozen=True, slots=True)
class Owner:
    """Who a job is like: its user, name and command, and the batch its steps count in."""

    user: str
    name: str
    command: Any
    init_batch: int


@dataclass(frozen=True, slots=True)
class WorkLeft:
    """Progress still to make (steps at the initial batch), and where the figure came from."""

    steps: float
    source: WorkSource


@dataclass(slots=True)
class LearnedTotals:
    """The totals succeeded jobs reached, by (user, name, initial batch) and by
    (user, command, initial batch)."""

    by_name: dict[tuple[str, str, int], list[float]]
    by_command: dict[tuple[str, str, int], list[float]]

    def total(self, job: Owner) -> float | None:
        """The median total of jobs like `job`, None when none has ended."""
        totals = self.by_name.get((job.user, job.name, job.init_batch)) if job.name else None
        if not totals:
            totals = self.by_command.get((job.user, command_key(job.command), job.init_batch))
        return statistics.median(totals) if totals else None


def work_left(report: GoodputReport, learned: float | None, latest: Any = None) -> WorkLeft | None:
    """The rule of the module docstring, for one job's newest goodput report, the
    total learned for jobs like it (None: none learned) and its newest progress
    report as stored (`Job.progress`, for a total declared in epochs or steps)."""
    if report.target is not None:
        return WorkLeft(max(0.0, report.target - report.progress), WorkSource.DECLARED)
    declared = _declared_fraction(latest)
    if declared is not None:
        fraction, progress = declared
        return WorkLeft(progress * (1.0 - fraction) / fraction, WorkSource.DECLARED)
    if learned is not None and learned > report.progress:
        return WorkLeft(learned - report.progress, WorkSource.LEARNED)
    return None


def _declared_fraction(latest: Any) -> tuple[float, float] | None:
    """(fraction done of a total declared in epochs or steps, progress made), from
    one stored progress report that carries both; None below `MIN_FRACTION`."""
    if not isinstance(latest, Mapping):
        return None
    goodput = latest.get("goodput")
    progress = goodput.get("progress") if isinstance(goodput, Mapping) else None
    if not isinstance(progress, int | float) or isinstance(progress, bool) or progress <= 0:
        return None
    fraction = fraction_done(latest)
    if fraction is None or fraction < MIN_FRACTION:
        return None
    return fraction, float(progress)


def learn_totals(session: Session, users: Iterable[str], window: int = WINDOW) -> LearnedTotals:
    """What `users`' latest `window` succeeded jobs that reported goodput reached."""
    wanted = sorted(set(users))
    by_name: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    by_command: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    if not wanted:
        return LearnedTotals({}, {})
    rows = session.connection().execute(
        select(col(Job.user), col(Job.name), col(Job.command), col(Job.progress))
        .where(col(Job.state) == JobState.SUCCEEDED.value, col(Job.user).in_(wanted))
        .order_by(col(Job.id).desc())
        .limit(window)
    )
    for user, name, command, progress in rows:
        reached = _reached(progress)
        if reached is None:
            continue
        total, init_batch = reached
        if name:
            by_name[(user, name, init_batch)].append(total)
        by_command[(user, command_key(command), init_batch)].append(total)
    return LearnedTotals(dict(by_name), dict(by_command))


def _reached(progress: Any) -> tuple[float, int] | None:
    """(progress reached, initial batch) from an ended job's last report, if it has both."""
    if not isinstance(progress, Mapping):
        return None
    goodput = progress.get("goodput")
    if not isinstance(goodput, Mapping):
        return None
    reached, init_batch = goodput.get("progress"), goodput.get("init_batch")
    if not isinstance(reached, int | float) or not isinstance(init_batch, int):
        return None
    if reached <= 0 or isinstance(reached, bool):
        return None
    return float(reached), init_batch
