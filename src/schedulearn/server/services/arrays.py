"""Job arrays on the server: what a task of an array sees in its environment.

The rows of an array are made by `services.jobs.submit` (`array_id` is the
first task's job id, `array_index` the task's index, `array_size` the
number of tasks); the limit on how many run at once is the core's
(`core.eligibility`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row

from schedulearn.protocol import ENV_ARRAY_ID, ENV_ARRAY_INDEX, ENV_ARRAY_SIZE


def array_env(job: Row[Any]) -> dict[str, str]:
    """SCHEDULEARN_ARRAY_ID, _INDEX and _SIZE for a task of an array; {} otherwise.

    `job` is a row of the job's columns, as the work handout reads them."""
    if job.array_id is None:
        return {}
    return {
        ENV_ARRAY_ID: str(job.array_id),
        ENV_ARRAY_INDEX: str(job.array_index),
        ENV_ARRAY_SIZE: str(job.array_size or 1),
    }
