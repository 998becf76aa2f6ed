"""The web dashboard: server-rendered pages under `/ui`, assets under `/ui/static`.

Owns the pages (Cluster, Queue, Queues, Jobs, Job detail, Submit, Policy,
Metrics, sign-in), their templates and static files, and the page
session (cookie, CSRF). Pages call the server's services like the API
does; live parts refresh with htmx and the job log streams over
server-sent events. Every asset is served by the app itself (the
JavaScript libraries are vendored by `scripts/vendor-js`), so the pages
work with no network beyond the server.

`install(app)` is the one hook `create_app` calls.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from schedulearn.server.web import session as sessions
from schedulearn.server.web.deps import (
    HERE,
    PageError,
    SignInNeeded,
    WebState,
    safe_next,
    sign_in_url,
    viewer,
)
from schedulearn.server.web.render import make_templates, page

STATIC_DIR = HERE / "static"


def install(app: FastAPI) -> None:
    """Mount the dashboard's routes, static files and error pages on `app`."""
    from schedulearn.server.web import (
        routes_actions,
        routes_auth,
        routes_cluster,
        routes_jobs,
        routes_queues,
    )

    app.state.web = WebState(make_templates())
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="web-static")
    for module in (routes_auth, routes_cluster, routes_actions, routes_jobs, routes_queues):
        app.include_router(module.router)

    @app.exception_handler(SignInNeeded)
    async def _sign_in(request: Request, exc: SignInNeeded) -> Response:
        url = sign_in_url(exc.next_path)
        response: Response
        if request.headers.get("hx-request") == "true":
            # htmx would swap the sign-in page into a fragment; make it navigate.
            response = Response(status_code=204, headers={"HX-Redirect": url})
        elif exc.ended:
            # A session that ended (signed out, token revoked): 401 with the form.
            response = routes_auth.login_form_page(
                request,
                safe_next(exc.next_path),
                "Your session has ended (signed out, or its token was revoked or expired); "
                "sign in again.",
                401,
            )
        else:
            return RedirectResponse(url, status_code=303)
        if exc.ended:
            response.delete_cookie(sessions.SESSION_COOKIE, path="/")
        return response

    @app.exception_handler(PageError)
    async def _page_error(request: Request, exc: PageError) -> HTMLResponse:
        try:
            who = await viewer(request)
        except SignInNeeded:
            who = None
        return page(
            request, "error.html", who, status=exc.status, title=exc.title, message=exc.message
        )


__all__ = ["STATIC_DIR", "install"]
