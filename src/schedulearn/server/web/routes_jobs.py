"""Pages about jobs: the Jobs list, a job's detail (live log, cancel), Submit.

The other forms that change jobs (hold, priority, resubmit, cancel a
selection) are `routes_actions`.

Routers parse, call one service function, render. Query parameters are
read leniently (a bad page number shows page 1) because people edit
URLs by hand; forms are checked for their CSRF token before anything
changes.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from schedulearn.protocol import JobState
from schedulearn.server.api.deps import State
from schedulearn.server.errors import ServiceError
from schedulearn.server.services import full_logs
from schedulearn.server.services import jobs as job_service
from schedulearn.server.services.jobs import Submitted
from schedulearn.server.web import forms, job_data, jobs_listing, logstream
from schedulearn.server.web.deps import PageError, Signed, call, check_csrf
from schedulearn.server.web.render import is_partial, page, redirect

router = APIRouter(prefix="/ui", include_in_schema=False)

PER_PAGE = 25
ACTIVE = [JobState.PENDING, JobState.ASSIGNED, JobState.RUNNING, JobState.PREEMPTING]
FINISHED = [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT]
STATE_FILTERS: dict[str, list[JobState]] = {
    "": [],
    "active": ACTIVE,
    "finished": FINISHED,
    **{s.value: [s] for s in JobState},
}


def _int(text: str | None, default: int, least: int = 1) -> int:
    try:
        return max(least, int(text or default))
    except ValueError:
        return default


def _job_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise PageError(
            404, f"{text!r} is not a job number; pick a job from the Jobs page"
        ) from None
    if not 0 < value < 2**62:
        raise PageError(404, f"no job {value}; pick a job from the Jobs page")
    return value


@router.get("/jobs", response_class=HTMLResponse)
async def job_list(
    request: Request,
    state: State,
    who: Signed,
    job_state: Annotated[str, Query(alias="state")] = "",
    user: str = "",
    name: str = "",
    page_no: Annotated[str, Query(alias="page")] = "1",
) -> HTMLResponse:
    states = STATE_FILTERS.get(job_state, [])
    number = _int(page_no, 1)
    data = await call(
        state,
        jobs_listing.jobs_page,
        who.caller,
        states,
        user.strip()[:100] or None,
        name.strip()[:200] or None,
        (number - 1) * PER_PAGE,
        PER_PAGE,
        state.settings.default_policy,
        state.clock.now(),
    )
    listing = data.listing
    listing = listing.model_copy(update={"items": await state.predictions.annotate(listing.items)})
    pages = max(1, -(-listing.total // PER_PAGE))
    return page(
        request,
        "jobs.html",
        who,
        active="jobs",
        listing=listing,
        data=data,
        filters={
            "state": job_state if job_state in STATE_FILTERS else "",
            "user": user,
            "name": name,
        },
        state_filters=list(STATE_FILTERS),
        page_no=number,
        pages=pages,
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_detail(request: Request, state: State, who: Signed, job_id: str) -> HTMLResponse:
    data = await call(
        state,
        job_data.job_page,
        _job_id(job_id),
        who.caller,
        state.settings.default_policy,
        state.clock.now(),
    )
    data.job = (await state.predictions.annotate([data.job]))[0]
    partial = is_partial(request)
    name = "_job_live.html" if partial else "job.html"
    # A partial also carries the timeline, swapped out of band into the side column.
    return page(request, name, who, active="jobs", data=data, job=data.job, oob=partial)


@router.post("/jobs/{job_id}/cancel", response_model=None)
async def cancel(
    request: Request,
    state: State,
    who: Signed,
    job_id: str,
    csrf: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    check_csrf(request, who, csrf)
    number = _job_id(job_id)
    public, changes = await call(state, job_service.cancel, number, who.caller, state.clock.now())
    state.wakeups.notify(changes)
    if public.state is JobState.CANCELLED:
        notice = f"Job {number} is cancelled."
    elif public.state.is_final:
        notice = f"Job {number} had already ended ({public.state.value}); nothing to cancel."
    else:
        notice = f"Job {number} is being stopped; it ends as cancelled."
    return redirect(f"/ui/jobs/{number}", notice)


@router.get("/jobs/{job_id}/log")
async def log_stream(
    request: Request, state: State, who: Signed, job_id: str, after: str = "0"
) -> StreamingResponse:
    number = _job_id(job_id)
    start = _int(request.headers.get("last-event-id") or after, 0, least=0)
    first = await call(state, logstream.first_tail, number, who.caller, start)
    return StreamingResponse(
        logstream.follow(state, number, first),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/jobs/{job_id}/log/full")
async def log_download(state: State, who: Signed, job_id: str) -> StreamingResponse:
    """The job's whole output as a text file (`services.full_logs`)."""
    number = _job_id(job_id)
    store = full_logs.store_dir(state.settings)
    parts = await call(state, full_logs.plan_for, store, number, who.caller)
    return StreamingResponse(
        full_logs.plain_text(parts),
        media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="job-{number}.log"'},
    )


def _submit_form(
    request: Request, who: Signed, form: forms.SubmitForm, status: int = 200
) -> HTMLResponse:
    return page(
        request,
        "submit.html",
        who,
        status=status,
        active="submit",
        form=form,
        fields={f[0]: f for f in forms.FIELDS},
        launchers=forms.LAUNCHERS,
    )


@router.get("/submit", response_class=HTMLResponse)
async def submit_form(request: Request, who: Signed) -> HTMLResponse:
    blank = forms.SubmitForm(
        values={k: "" for k in forms.FIELD_NAMES}
        | {"gpus": "1", "launcher": "none", "count": "1", "max_restarts": "3"}
    )
    return _submit_form(request, who, blank)


@router.post("/submit", response_model=None)
async def submit(request: Request, state: State, who: Signed) -> Response:
    raw = await request.form()
    check_csrf(request, who, str(raw.get("csrf") or ""))
    form = forms.parse(raw)
    if form.spec is None:
        return _submit_form(request, who, form, 422)
    try:
        result: Submitted = await state.submitter.add((form.spec, who.caller))
    except ServiceError as exc:
        state.metrics.refused.inc()
        form.errors[forms.refusal_field(exc.message)] = exc.message
        return _submit_form(request, who, form, exc.status)
    state.wakeups.notify(result.changes)
    state.metrics.submitted.inc(len(result.jobs))
    first = result.jobs[0].id
    if len(result.jobs) == 1:
        return redirect(f"/ui/jobs/{first}", f"Submitted job {first}.")
    return redirect(
        f"/ui/jobs/{first}", f"Submitted {len(result.jobs)} jobs: {first} to {result.jobs[-1].id}."
    )
