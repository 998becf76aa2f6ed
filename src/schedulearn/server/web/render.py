"""Turning page data into HTML: the Jinja2 environment, its filters, `page()`.

Owns how figures read on a page: durations ("3 min 12 s"), times,
commands, the colour a job has everywhere (GPU cells, badges) and the
one-shot notice shown after a redirect (`sl_notice` cookie).
"""

from __future__ import annotations

import colorsys
import shlex
import time
from typing import Any
from urllib.parse import quote, unquote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from schedulearn.protocol import JobState
from schedulearn.server.web import session as sessions
from schedulearn.server.web.deps import HERE, Viewer
from schedulearn.server.web.metric_chart import figure

NOTICE_COOKIE = "sl_notice"

NAV = (
    ("cluster", "Cluster", "/ui/cluster"),
    ("queue", "Queue", "/ui/queue"),
    ("queues", "Queues", "/ui/queues"),
    ("jobs", "Jobs", "/ui/jobs"),
    ("submit", "Submit", "/ui/submit"),
    ("policy", "Policy", "/ui/policy"),
    ("metrics", "Metrics", "/ui/metrics"),
)


# Pages load nothing from any other host; the browser enforces it too.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 9.95:
        return f"{max(0.0, seconds):.1f} s"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m:02d} min"
    d, h = divmod(h, 24)
    return f"{d} d {h} h"


def clock(ts: float | None, now: float | None = None) -> str:
    """Local time; the date only when it is not today."""
    if ts is None:
        return "—"
    local = time.localtime(ts)
    today = time.localtime(now if now is not None else time.time())
    if local[:3] == today[:3]:
        return time.strftime("%H:%M:%S", local)
    return time.strftime("%Y-%m-%d %H:%M", local)


def full_time(ts: float | None) -> str:
    return "—" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(ts))


def command_text(command: list[str] | str) -> str:
    return command if isinstance(command, str) else shlex.join(command)


def job_hue(job_id: int) -> int:
    """A hue per job, spread by the golden angle so neighbours differ."""
    return round((job_id * 137.508) % 360)


def job_colors(job_id: int) -> dict[str, str]:
    """Background, border and text colours of a job (pastel fill, deep edge)."""
    h = job_hue(job_id) / 360.0

    def hexcolor(lightness: float, saturation: float) -> str:
        r, g, b = colorsys.hls_to_rgb(h, lightness, saturation)
        return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"

    return {"bg": hexcolor(0.88, 0.70), "edge": hexcolor(0.42, 0.60), "ink": hexcolor(0.25, 0.60)}


def job_style(job_id: int) -> str:
    c = job_colors(job_id)
    return f"--job-bg:{c['bg']};--job-edge:{c['edge']};--job-ink:{c['ink']}"


def state_class(state: JobState | str) -> str:
    return f"st-{JobState(state).value}"


def placement_text(placement: dict[str, list[int]] | None) -> str:
    if not placement:
        return "—"
    return " ".join(f"{n}:{','.join(map(str, g)) or '-'}" for n, g in sorted(placement.items()))


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}%"


def make_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    env = templates.env
    env.filters.update(
        duration=duration,
        clock=clock,
        full_time=full_time,
        command=command_text,
        job_style=job_style,
        state_class=state_class,
        placement=placement_text,
        percent=percent,
        metric=figure,
    )
    env.globals["nav"] = NAV
    env.globals["csrf_field"] = sessions.CSRF_FIELD
    return templates


def page(
    request: Request,
    name: str,
    who: Viewer | None,
    status: int = 200,
    **context: Any,
) -> HTMLResponse:
    """Render `name` with the common context (viewer, CSRF token, notice, now)."""
    templates: Jinja2Templates = request.app.state.web.templates
    raw = request.cookies.get(NOTICE_COOKIE)
    notice = unquote(raw) if raw else None
    context.setdefault("now", request.app.state.sl.clock.now())
    response = templates.TemplateResponse(
        request,
        name,
        {"who": who, "csrf": who.csrf if who else "", "notice": notice, **context},
        status_code=status,
    )
    if raw:
        response.delete_cookie(NOTICE_COOKIE, path="/ui")
    response.headers["Cache-Control"] = "no-store"
    response.headers.update(SECURITY_HEADERS)
    return response


def is_partial(request: Request) -> bool:
    """An htmx request for just the live part of a page."""
    return request.headers.get("hx-request") == "true"


def redirect(url: str, notice: str | None = None) -> RedirectResponse:
    """303 to `url` (a POST becomes a GET), with a one-shot notice for the next page."""
    response = RedirectResponse(url, status_code=303)
    if notice:
        response.set_cookie(
            NOTICE_COOKIE,
            quote(notice[:300]),
            max_age=60,
            path="/ui",
            httponly=True,
            samesite="lax",
        )
    return response
