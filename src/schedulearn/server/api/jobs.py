"""/api/v1/jobs: submit (JSON or YAML), list, show, cancel, logs (with SSE follow).

Routers parse, call one service function, render.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from schedulearn.protocol import (
    ErrorBody,
    JobHistory,
    JobList,
    JobMove,
    JobPublic,
    JobSpec,
    JobState,
    JobUpdate,
    LogPage,
    ProgressHistory,
    SubmitReply,
)
from schedulearn.protocol_errors import explain
from schedulearn.server import parsing
from schedulearn.server.api.below import JSON, json_reply
from schedulearn.server.api.deps import Admin, JobId, State, User
from schedulearn.server.auth import Caller
from schedulearn.server.errors import ERROR_RESPONSES, BadRequest, validation_error
from schedulearn.server.services import full_logs, jobs, logs, moves, progress
from schedulearn.server.services.idempotency import MAX_KEY_LENGTH, Submission
from schedulearn.server.services.jobs import Submitted
from schedulearn.server.state import AppState
from schedulearn.server.wakeups import Changes, wait_for

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)

IDEMPOTENCY_HEADER = "Idempotency-Key"
_SPEC_REF = {"$ref": "#/components/schemas/JobSpec"}


class _Invalid(Exception):
    def __init__(self, errors: list[ErrorDetails]) -> None:
        self.errors = errors


async def parse_spec(body: bytes, content_type: str) -> JobSpec:
    """A job spec from a JSON or YAML body, parsed and validated off the loop within limits."""
    return await parsing.parse_body(body, content_type, _to_spec)


def _to_spec(data: Any) -> JobSpec:
    if not isinstance(data, dict):
        raise BadRequest("the body must be one job spec (a mapping with at least `command`)")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise _Invalid(explain(JobSpec, exc.errors())) from None


@router.post(
    "",
    status_code=201,
    response_model=SubmitReply,
    summary="Submit a job (or a job array with `count`)",
    responses={
        409: {"model": ErrorBody, "description": "The Idempotency-Key was used for another spec"},
        422: {"description": "Invalid spec, or a job no node could ever run"},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": _SPEC_REF},
                "application/yaml": {"schema": _SPEC_REF},
            },
        }
    },
)
async def submit(
    request: Request,
    state: State,
    who: User,
    key: Annotated[
        str | None,
        Header(
            alias=IDEMPOTENCY_HEADER,
            min_length=1,
            max_length=MAX_KEY_LENGTH,
            description="Any unique string per submission (a UUID): a repeat of the request "
            "with the same key returns the jobs of the first instead of making new ones, for "
            "a day; the same key with another spec is refused with 409",
        ),
    ] = None,
) -> Any:
    body = await request.body()
    # A body whose request does not say its type is taken as JSON.
    return await accept(state, who, key, body, request.headers.get("content-type", JSON))


async def accept(
    state: AppState, who: Caller, key: str | None, body: bytes, content_type: str
) -> Response:
    """A submission's reply: 201 with its jobs, 422 for an invalid spec; a
    refusal by the service is raised (the app's error handlers render it).

    The route above and `fast_submit.FastSubmit` both answer with this."""
    try:
        spec = await parse_spec(body, content_type)
    except _Invalid as exc:
        state.metrics.refused.inc()
        return validation_error(exc.errors)
    try:
        result: Submitted = await state.submitter.add(Submission(spec, who, key))
    except Exception:
        state.metrics.refused.inc()
        raise
    state.wakeups.notify(result.changes)
    state.metrics.submitted.inc(len(result.jobs))
    reply = SubmitReply(ids=[j.id for j in result.jobs], jobs=result.jobs)
    return json_reply(reply, status_code=201)


@router.get("", response_model=JobList, summary="List jobs, newest first, with filters")
async def list_jobs(
    state: State,
    who: User,
    job_state: Annotated[list[JobState] | None, Query(alias="state")] = None,
    user: Annotated[str | None, Query(max_length=100)] = None,
    name: Annotated[str | None, Query(max_length=200)] = None,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Annotated[str, Query(pattern="^(asc|desc)$")] = "desc",
    array: Annotated[
        int | None, Query(ge=0, le=2**62, description="Only the tasks of this job array")
    ] = None,
) -> JobList:
    listing = await state.db.run(
        jobs.list_jobs, who, job_state or [], user, name, offset, limit, order == "desc", array
    )
    return listing.model_copy(update={"items": await state.predictions.annotate(listing.items)})


@router.get(
    "/{job_id}",
    response_model=JobPublic,
    summary="One job, with why it waits and when it is expected to start and end",
)
async def show(job_id: JobId, state: State, who: User) -> JobPublic:
    job = await state.db.run(
        jobs.show_to, job_id, who, state.settings.default_policy, state.clock.now()
    )
    return (await state.predictions.annotate([job]))[0]


@router.get("/{job_id}/history", response_model=JobHistory, summary="The job's state changes")
async def history(job_id: JobId, state: State, who: User) -> JobHistory:
    return await state.db.run(jobs.history, job_id, who)


@router.get(
    "/{job_id}/progress",
    response_model=ProgressHistory,
    summary="The job's recent progress reports (the last 200), oldest first (its owner and admins)",
)
async def progress_history(job_id: JobId, state: State, who: User) -> ProgressHistory:
    return await state.db.run(progress.history, job_id, who)


async def _change(
    state: AppState, change: Callable[..., tuple[JobPublic, Changes]], *args: object
) -> JobPublic:
    """Run `change(session, *args)` on the database threads, wake whatever it changed
    (the scheduler, a node's agent, a job's followers) and return the job as it is now."""
    public, changes = await state.db.run(change, *args)
    state.wakeups.notify(changes)
    return public


@router.post(
    "/{job_id}/move",
    response_model=JobPublic,
    summary="Move or resize a running preemptible job (admin): checkpoint, stop, restart there",
    responses={409: {"model": ErrorBody, "description": "Not running, or changed meanwhile"}},
)
async def move(job_id: JobId, body: JobMove, state: State, _who: Admin) -> JobPublic:
    now, policy = state.clock.now(), state.settings.default_policy
    return await _change(state, moves.move, job_id, body, now, policy)


@router.post("/{job_id}/cancel", response_model=JobPublic, summary="Cancel (stops it if running)")
async def cancel(job_id: JobId, state: State, who: User) -> JobPublic:
    return await _change(state, jobs.cancel, job_id, who, state.clock.now())


@router.post(
    "/{job_id}/hold",
    response_model=JobPublic,
    summary="Hold a pending job: it keeps its place in the queue but does not start",
    responses={409: {"model": ErrorBody, "description": "The job is not pending"}},
)
async def hold(job_id: JobId, state: State, who: User) -> JobPublic:
    return await _change(state, jobs.set_held, job_id, who, True)


@router.post(
    "/{job_id}/release",
    response_model=JobPublic,
    summary="Release a held job: it may start again",
    responses={409: {"model": ErrorBody, "description": "The job is not pending"}},
)
async def release(job_id: JobId, state: State, who: User) -> JobPublic:
    return await _change(state, jobs.set_held, job_id, who, False)


@router.patch(
    "/{job_id}",
    response_model=JobPublic,
    summary="Change a job's priority (within your range)",
    responses={409: {"model": ErrorBody, "description": "The job has ended"}},
)
async def update(job_id: JobId, body: JobUpdate, state: State, who: User) -> JobPublic:
    return await _change(state, jobs.update_job, job_id, who, body)


@router.get(
    "/{job_id}/logs",
    response_model=LogPage,
    summary="Output lines after `after`; with follow=true, a server-sent event stream "
    "(its owner and admins)",
    responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}},
)
async def job_logs(
    job_id: JobId,
    state: State,
    who: User,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    follow: bool = False,
) -> Any:
    first, ended = await state.db.run(logs.page_for, job_id, who, after, limit)
    if not follow:
        return json_reply(first)
    return StreamingResponse(
        _follow(state, job_id, who, first, ended),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/{job_id}/logs/full",
    summary="The job's whole output as plain text: each attempt's full log, uploaded by its "
    "agent, else what the server kept (its owner and admins)",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def job_full_log(job_id: JobId, state: State, who: User) -> StreamingResponse:
    store = full_logs.store_dir(state.settings)
    parts = await state.db.run(full_logs.plan_for, store, job_id, who)
    return StreamingResponse(
        full_logs.plain_text(parts),
        media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'inline; filename="job-{job_id}.log"'},
    )


# After a job ends its last lines may still be in flight from the agent.
_LATE_LINES_SECONDS = 1.0


async def _follow(
    state: State, job_id: int, who: Caller, page: LogPage, ended: float | None
) -> AsyncIterator[str]:
    with state.wakeups.watch_job(job_id) as event:
        while True:
            for line in page.lines:
                yield f"id: {line.seq}\nevent: line\ndata: {line.model_dump_json()}\n\n"
            if not page.lines:
                if ended is not None:
                    late = ended + _LATE_LINES_SECONDS - state.clock.now()
                    if late <= 0:
                        public = await state.db.run(
                            jobs.show_to,
                            job_id,
                            who,
                            state.settings.default_policy,
                            state.clock.now(),
                        )
                        yield f"event: end\ndata: {public.model_dump_json()}\n\n"
                        return
                    await wait_for(event, late)
                elif not await wait_for(event, 15.0):
                    yield ": keep-alive\n\n"
            else:
                await asyncio.sleep(0)
            page, ended = await state.db.run(logs.page, job_id, page.next_after, 1000)
