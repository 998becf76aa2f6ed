"""The job page's "download full log": every line the server keeps, as a text file.

Owns the download's text (one line per output line, in the order the job
printed them) and how it is read: page by page (`services.logs.page`), so a
long log is never held in memory at once. It serves what the server
stored; where the server cut a log it says so itself in the lines (the
full-log store of the log-keeping work replaces this route when merged).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from sqlmodel import Session

from schedulearn.protocol import LogPage
from schedulearn.server.auth import Caller
from schedulearn.server.services import logs
from schedulearn.server.state import AppState

PAGE_LINES = 5000


def first_page(session: Session, job_id: int, caller: Caller) -> LogPage:
    """The first lines, for a caller who may read the job's log (403 otherwise)."""
    page, _ = logs.page_for(session, job_id, caller, 0, PAGE_LINES)
    return page


def _next_page(session: Session, job_id: int, after: int) -> LogPage:
    page, _ = logs.page(session, job_id, after, PAGE_LINES)
    return page


def text_of(page: LogPage) -> str:
    return "".join(f"{line.text}\n" for line in page.lines)


async def download(state: AppState, job_id: int, first: LogPage) -> AsyncIterator[bytes]:
    """The log as text, page after page, up to the last line stored when it is read."""
    page = first
    while page.lines:
        yield text_of(page).encode()
        if len(page.lines) < PAGE_LINES:
            return
        page = await state.db.run(_next_page, job_id, page.next_after)
