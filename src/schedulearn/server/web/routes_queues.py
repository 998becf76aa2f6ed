"""The Queues page (/ui/queues): each tenant queue's use, guarantee and share over time.

Routers parse, call one service function, render.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from schedulearn.server.api.deps import State
from schedulearn.server.web.deps import Signed, call
from schedulearn.server.web.queue_shares import DEFAULT_WINDOW, WINDOWS, queues_page
from schedulearn.server.web.render import page

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("/queues", response_class=HTMLResponse)
async def queues(
    request: Request, state: State, who: Signed, window: str = DEFAULT_WINDOW
) -> HTMLResponse:
    data = await call(state, queues_page, state.clock.now(), window)
    return page(request, "queues.html", who, active="queues", data=data, windows=list(WINDOWS))
