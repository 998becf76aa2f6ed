"""Pages about the cluster as a whole: Cluster, Queue, Policy (its switch, its preview), Metrics.

Routers parse, call one service function, render. An htmx request
(`HX-Request`) gets only the page's live part, which it swaps in place.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from schedulearn.server.api.deps import State
from schedulearn.server.errors import ServiceError
from schedulearn.server.services import policy as policy_service
from schedulearn.server.web import history, overview, previews
from schedulearn.server.web.deps import PageError, Signed, call, check_csrf
from schedulearn.server.web.render import is_partial, page, redirect

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("/cluster", response_class=HTMLResponse)
async def cluster(request: Request, state: State, who: Signed) -> HTMLResponse:
    data = await call(
        state, overview.cluster_page, dict(state.samples), state.settings.default_policy
    )
    name = "_cluster_live.html" if is_partial(request) else "cluster.html"
    return page(request, name, who, active="cluster", data=data)


@router.get("/queue", response_class=HTMLResponse)
async def queue(request: Request, state: State, who: Signed) -> HTMLResponse:
    data = await call(state, overview.queue_page, state.settings.default_policy, state.clock.now())
    _, forecast = await state.predictions.current()
    name = "_queue_live.html" if is_partial(request) else "queue.html"
    return page(request, name, who, active="queue", data=data, forecast=forecast)


@router.get("/policy", response_class=HTMLResponse)
async def policy(request: Request, state: State, who: Signed) -> HTMLResponse:
    data = await call(state, overview.policy_page, state.settings.default_policy)
    return page(request, "policy.html", who, active="policy", data=data, error=None, typed=None)


@router.get("/policy/preview", response_class=HTMLResponse)
async def policy_preview(
    request: Request, state: State, who: Signed, policies: str = ""
) -> HTMLResponse:
    """`schedulearn policy preview` as a page: the queue simulated under each policy."""
    asked = policies.strip()[:2000]
    try:
        preview = await state.predictions.preview(asked or None)
    except ServiceError as exc:  # a bad spec: the registry's message, beside the field
        return page(
            request,
            "policy_preview.html",
            who,
            status=exc.status,
            active="policy",
            data=None,
            error=exc.message,
            typed=asked,
        )
    return page(
        request,
        "policy_preview.html",
        who,
        active="policy",
        data=previews.page_of(preview),
        error=None,
        typed=asked,
    )


@router.post("/policy", response_model=None)
async def switch_policy(
    request: Request,
    state: State,
    who: Signed,
    spec: Annotated[str, Form(max_length=500)] = "",
    csrf: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    check_csrf(request, who, csrf)
    if not who.is_admin:
        raise PageError(
            403,
            f"only an admin may switch the policy; you are signed in as {who.user} "
            f"({who.role.value}). Ask an admin, or sign in with an admin token.",
            "Only an admin can switch the policy",
        )
    try:
        result = await state.db.run(policy_service.set_spec, spec)
    except ServiceError as exc:  # a bad spec: the registry's message, beside the field
        data = await call(state, overview.policy_page, state.settings.default_policy)
        return page(
            request,
            "policy.html",
            who,
            status=400,
            active="policy",
            data=data,
            error=exc.message,
            typed=spec,
        )
    state.wakeups.wake_scheduler()
    return redirect(
        "/ui/policy", f"Policy switched to {result.spec}; in force from the next scheduling pass."
    )


@router.get("/metrics", response_class=HTMLResponse)
async def metrics(
    request: Request, state: State, who: Signed, window: str = history.DEFAULT_WINDOW
) -> HTMLResponse:
    data = await call(state, history.metrics_page, state.clock.now(), window)
    return page(
        request, "metrics.html", who, active="metrics", data=data, windows=list(history.WINDOWS)
    )
