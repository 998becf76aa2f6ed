"""When each attempt of a job held GPUs: the one rule `services.usage` (totals
per user or queue over a window) and `services.accounting` (per job) sum.

An attempt holds the GPUs of its parts (`job_part`) from its move to
`assigned` until it leaves the holding states (back to `pending`, or an
end), or until now. Owns nothing; it reads `job_part` and `job_transition`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlmodel import Session, col

from schedulearn.protocol import JobState
from schedulearn.server.models import JobPart, JobTransition

# Leaving these ends an attempt's hold on its GPUs.
RELEASED = frozenset(
    {
        JobState.PENDING,
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.LOST,
        JobState.TIMEOUT,
    }
)


@dataclass(frozen=True, slots=True)
class Hold:
    """One attempt's hold on its GPUs: from `start` to `end` (None: holds them now)."""

    job_id: int
    gpus: int
    start: float
    end: float | None

    def seconds(self, since: float, now: float) -> float:
        """Seconds of the hold within [since, now]."""
        end = now if self.end is None else min(self.end, now)
        return max(0.0, end - max(self.start, since))


def attempt_holds(session: Session, job_ids: Any) -> list[Hold]:
    """Every attempt's hold of the jobs in `job_ids` (a list or a select of ids)."""
    gpus: dict[tuple[int, int], int] = defaultdict(int)
    for job_id, attempt, held in session.execute(
        select(col(JobPart.job_id), col(JobPart.attempt), col(JobPart.gpus)).where(
            col(JobPart.job_id).in_(job_ids)
        )
    ):
        gpus[(job_id, attempt)] += len(held or ())
    starts: dict[tuple[int, int], float] = {}
    ends: dict[tuple[int, int], float] = {}
    for job_id, attempt, to_state, at in session.execute(
        select(
            col(JobTransition.job_id),
            col(JobTransition.attempt),
            col(JobTransition.to_state),
            col(JobTransition.at),
        )
        .where(col(JobTransition.job_id).in_(job_ids))
        .order_by(col(JobTransition.id))
    ):
        key = (job_id, attempt)
        state = JobState(to_state)
        if state is JobState.ASSIGNED:
            starts.setdefault(key, at)
        elif state in RELEASED and key in starts:
            ends.setdefault(key, at)
    return [Hold(key[0], gpus.get(key, 0), start, ends.get(key)) for key, start in starts.items()]
