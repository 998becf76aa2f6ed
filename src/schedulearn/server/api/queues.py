"""/api/v1/queues (tenant queues: list for all, add/change/remove for admins),
/api/v1/usage (GPU-hours, jobs, mean wait per user or queue) and
/api/v1/acct (the same per job).

Routers parse, call one service function, render. A change to a queue
wakes the scheduler: guarantees and limits apply from the next pass.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from schedulearn.protocol import (
    QUEUE_NAME_PATTERN,
    AcctReport,
    JobState,
    QueueCreate,
    QueueHistory,
    QueueList,
    QueuePublic,
    QueueRemoved,
    QueueUpdate,
    UsageBy,
    UsageReport,
)
from schedulearn.server.api.deps import Admin, State, User
from schedulearn.server.errors import ERROR_RESPONSES
from schedulearn.server.services import accounting, queue_admin, usage

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES)

QueueName = Annotated[str, Path(min_length=1, max_length=63, pattern=QUEUE_NAME_PATTERN)]
# `usage` and `acct`: where their window starts (services.usage.parse_since).
SinceText = Annotated[
    str, Query(max_length=40, description="A span back from now (12h, 7d, 2w) or a UTC date")
]


@router.get("/queues", response_model=QueueList, tags=["queues"], summary="Tenant queues now")
async def list_queues(state: State, _who: User) -> QueueList:
    return await state.db.run(queue_admin.list_queues, state.clock.now())


@router.get(
    "/queues/history",
    response_model=QueueHistory,
    tags=["queues"],
    summary="Each queue's GPUs in use and fair share over time",
)
async def queue_history(
    state: State,
    _who: User,
    since: Annotated[float, Query(ge=0, description="Unix time of the first sample")] = 0.0,
) -> QueueHistory:
    return await state.db.run(queue_admin.history, since)


@router.get("/queues/{name}", response_model=QueuePublic, tags=["queues"], summary="One queue")
async def get_queue(name: QueueName, state: State, _who: User) -> QueuePublic:
    return await state.db.run(queue_admin.get, name, state.clock.now())


@router.post(
    "/queues",
    response_model=QueuePublic,
    status_code=201,
    tags=["queues"],
    summary="Add a queue (admin)",
)
async def add_queue(body: QueueCreate, state: State, _who: Admin) -> QueuePublic:
    added = await state.db.run(queue_admin.add, body, state.clock.now())
    state.wakeups.wake_scheduler()
    return added


@router.patch(
    "/queues/{name}",
    response_model=QueuePublic,
    tags=["queues"],
    summary="Change a queue (admin): guarantee, limit, weight, members",
)
async def update_queue(
    name: QueueName, body: QueueUpdate, state: State, _who: Admin
) -> QueuePublic:
    changed = await state.db.run(queue_admin.update, name, body, state.clock.now())
    state.wakeups.wake_scheduler()
    return changed


@router.delete(
    "/queues/{name}",
    response_model=QueueRemoved,
    tags=["queues"],
    summary="Remove a queue that has no pending or running jobs (admin)",
)
async def remove_queue(name: QueueName, state: State, _who: Admin) -> QueueRemoved:
    removed = await state.db.run(queue_admin.remove, name)
    state.wakeups.wake_scheduler()
    return removed


@router.get(
    "/usage",
    response_model=UsageReport,
    tags=["queues"],
    summary="GPU-hours, jobs and mean wait per user or queue since a time",
)
async def get_usage(
    state: State,
    _who: User,
    by: UsageBy = UsageBy.USER,
    since: SinceText = usage.DEFAULT_SINCE,
) -> UsageReport:
    return await state.db.run(usage.report, by, since, state.clock.now())


@router.get(
    "/acct",
    response_model=AcctReport,
    tags=["queues"],
    summary="Per job: waited, ran, GPU-hours, restarts, preemptions (jobs active since a time)",
)
async def get_acct(
    state: State,
    _who: User,
    user: Annotated[str | None, Query(max_length=100)] = None,
    queue: Annotated[str | None, Query(max_length=63)] = None,
    job_state: Annotated[list[JobState] | None, Query(alias="state")] = None,
    since: SinceText = accounting.DEFAULT_SINCE,
    limit: Annotated[int, Query(ge=1, le=accounting.MAX_ROWS)] = 1000,
) -> AcctReport:
    where = accounting.AcctFilter(user, queue, tuple(job_state or ()))
    return await state.db.run(accounting.report, where, since, limit, state.clock.now())
