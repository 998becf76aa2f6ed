"""The web's forms that change jobs and nodes, as the CLI's commands do: hold,
release, priority, resubmit, cancel the selected jobs; drain and resume a node.

Routers parse, call one service function (the API's own, so the same
permission rules hold: a user acts on their own jobs, an admin on any; only
an admin drains a node), and redirect with a notice that says what became of
each job. Every form is checked for its CSRF token before anything changes.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response

from schedulearn.protocol import JobState, JobUpdate
from schedulearn.server.api.deps import State
from schedulearn.server.errors import ServiceError
from schedulearn.server.services import job_actions, nodes
from schedulearn.server.services import jobs as job_service
from schedulearn.server.services.jobs import Submitted
from schedulearn.server.web.deps import PageError, Signed, Viewer, call, check_csrf
from schedulearn.server.web.render import redirect
from schedulearn.server.web.routes_jobs import _job_id

router = APIRouter(prefix="/ui", include_in_schema=False)

Csrf = Annotated[str, Form(max_length=200)]
PRIORITY_LIMIT = 2**31 - 1


def _back(value: str) -> str:
    """Only the Jobs list (with its filters) is gone back to (no open redirect)."""
    if value.startswith("/ui/jobs") and "//" not in value and "\\" not in value:
        return value
    return "/ui/jobs"


@router.post("/jobs/{job_id}/hold", response_model=None)
async def hold(
    request: Request, state: State, who: Signed, job_id: str, csrf: Csrf = ""
) -> Response:
    return await _set_held(request, state, who, job_id, csrf, held=True)


@router.post("/jobs/{job_id}/release", response_model=None)
async def release(
    request: Request, state: State, who: Signed, job_id: str, csrf: Csrf = ""
) -> Response:
    return await _set_held(request, state, who, job_id, csrf, held=False)


async def _set_held(
    request: Request, state: State, who: Signed, job_id: str, csrf: str, held: bool
) -> Response:
    check_csrf(request, who, csrf)
    number = _job_id(job_id)
    _, changes = await call(state, job_service.set_held, number, who.caller, held)
    state.wakeups.notify(changes)
    said = (
        "is held: it keeps its place but does not start"
        if held
        else "is released: it may start again"
    )
    return redirect(f"/ui/jobs/{number}", f"Job {number} {said}.")


@router.post("/jobs/{job_id}/priority", response_model=None)
async def priority(
    request: Request,
    state: State,
    who: Signed,
    job_id: str,
    value: Annotated[str, Form(alias="priority", max_length=40)] = "",
    csrf: Csrf = "",
) -> Response:
    check_csrf(request, who, csrf)
    number = _job_id(job_id)
    try:
        wanted = int(value.strip())
    except ValueError:
        raise PageError(
            400, f"priority {value.strip()!r} is not a whole number; write e.g. 10 or -5"
        ) from None
    if abs(wanted) > PRIORITY_LIMIT:
        raise PageError(400, f"priority {wanted} is out of range; keep it within ±{PRIORITY_LIMIT}")
    public, changes = await call(
        state, job_service.update_job, number, who.caller, JobUpdate(priority=wanted)
    )
    state.wakeups.notify(changes)
    return redirect(f"/ui/jobs/{number}", f"Job {number} now has priority {public.priority}.")


@router.post("/jobs/{job_id}/resubmit", response_model=None)
async def resubmit(
    request: Request, state: State, who: Signed, job_id: str, csrf: Csrf = ""
) -> Response:
    check_csrf(request, who, csrf)
    number = _job_id(job_id)
    again = await call(
        state,
        job_actions.resubmission,
        number,
        who.caller,
        state.settings.default_policy,
        state.clock.now(),
    )
    try:
        result: Submitted = await state.submitter.add((again.spec, who.caller))
    except ServiceError as exc:  # e.g. no node can run it any more: the reason, as a page
        raise PageError(exc.status, exc.message) from None
    state.wakeups.notify(result.changes)
    state.metrics.submitted.inc(len(result.jobs))
    new = result.jobs[0].id
    note = f"Submitted job {new}, again: job {number}."
    if again.secret_keys:
        note += f" Its secret env ({', '.join(again.secret_keys)}) is not copied."
    return redirect(f"/ui/jobs/{new}", note)


@router.post("/jobs/cancel-selected", response_model=None)
async def cancel_selected(
    request: Request,
    state: State,
    who: Signed,
    job: Annotated[list[str] | None, Form(max_length=20)] = None,
    back: Annotated[str, Form(max_length=2000)] = "",
    csrf: Csrf = "",
) -> Response:
    check_csrf(request, who, csrf)
    to = _back(back)
    if not job:
        return redirect(to, "No job was selected: tick the jobs to cancel, then Cancel selected.")
    ids = [_job_id(text) for text in job]
    outcomes, changes = await call(
        state, job_actions.cancel_selected, ids, who.caller, state.clock.now()
    )
    state.wakeups.notify(changes)
    return redirect(to, _cancel_notice(outcomes))


def _cancel_notice(outcomes: list[job_actions.Cancelled]) -> str:
    """What became of each selected job, in a sentence or two."""
    done = [o.job_id for o in outcomes if o.state is JobState.CANCELLED]
    stopping = [o.job_id for o in outcomes if o.state is not None and not o.state.is_final]
    ended = [o.job_id for o in outcomes if o.state is not None and o.state.is_final]
    ended = [i for i in ended if i not in done]
    parts = []
    if done:
        parts.append(f"Cancelled {_ids(done)}.")
    if stopping:
        parts.append(f"Stopping {_ids(stopping)}; they end as cancelled.")
    if ended:
        parts.append(f"{_ids(ended).capitalize()} had already ended.")
    parts += [f"Job {o.job_id}: {o.refused}." for o in outcomes if o.refused]
    return " ".join(parts)


def _ids(ids: list[int]) -> str:
    return ("job " if len(ids) == 1 else "jobs ") + ", ".join(map(str, sorted(ids)))


def _admin_only(who: Viewer, what: str) -> None:
    if not who.is_admin:
        raise PageError(
            403,
            f"only an admin may {what}; you are signed in as {who.user} ({who.role.value}). "
            "Ask an admin.",
            f"Only an admin can {what}",
        )


@router.post("/nodes/{name}/drain", response_model=None)
async def drain(
    request: Request,
    state: State,
    who: Signed,
    name: str,
    reason: Annotated[str, Form(max_length=2000)] = "",
    csrf: Csrf = "",
) -> Response:
    check_csrf(request, who, csrf)
    _admin_only(who, "drain a node")
    shown, changes = await call(state, nodes.set_drained, name, True, dict(state.samples), reason)
    state.wakeups.notify(changes)
    why = f" ({shown.drain_reason})" if shown.drain_reason else ""
    return redirect(
        "/ui/cluster", f"Node {name} is drained{why}: its running jobs go on, no new job starts."
    )


@router.post("/nodes/{name}/resume", response_model=None)
async def resume(
    request: Request, state: State, who: Signed, name: str, csrf: Csrf = ""
) -> Response:
    check_csrf(request, who, csrf)
    _admin_only(who, "resume a node")
    _, changes = await call(state, nodes.set_drained, name, False, dict(state.samples))
    state.wakeups.notify(changes)
    return redirect("/ui/cluster", f"Node {name} is resumed: it takes new jobs again.")
