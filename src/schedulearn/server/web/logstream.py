"""The job page's live log: a server-sent event stream for the browser.

Owns the events the page's `EventSource` reads:
- `line` (id = the line's position in the job's log): one output line;
- `state`: the job's state changed (the page refreshes its header);
- `end`: the job ended and its last lines are in; the page closes the stream.
The stream resumes after `Last-Event-ID` when the browser reconnects, so
a dropped connection neither loses nor repeats lines. It sleeps on the
job's wake-up event (new lines or a state change), never on a timer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sqlalchemy import select
from sqlmodel import Session, col

from schedulearn.protocol import JobState, LogPage
from schedulearn.server.auth import Caller
from schedulearn.server.models import Job
from schedulearn.server.services import logs, visibility
from schedulearn.server.state import AppState
from schedulearn.server.wakeups import wait_for

# After a job ends its last lines may still be on their way from the agent.
LATE_LINES_SECONDS = 1.0
KEEP_ALIVE_SECONDS = 15.0
PAGE_LINES = 1000


@dataclass(frozen=True, slots=True)
class Tail:
    page: LogPage
    ended: float | None
    state: JobState
    exit_code: int | None


def first_tail(session: Session, job_id: int, caller: Caller, after: int) -> Tail:
    """`tail` for a caller who may read the job's log (403 otherwise: `visibility`).

    Checked once, when the stream opens: a job's owner never changes.
    """
    visibility.require_details(session, job_id, caller, "logs")
    return tail(session, job_id, after)


def tail(session: Session, job_id: int, after: int) -> Tail:
    """Lines after `after`, and the job's state (NotFound for an unknown job)."""
    page, ended = logs.page(session, job_id, after, PAGE_LINES)
    state, exit_code = session.execute(
        select(col(Job.state), col(Job.exit_code)).where(col(Job.id) == job_id)
    ).one()
    return Tail(page, ended, JobState(state), exit_code)


def _event(kind: str, data: object, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def follow(state: AppState, job_id: int, first: Tail) -> AsyncIterator[str]:
    current = first
    shown = None
    yield "retry: 2000\n\n"
    with state.wakeups.watch_job(job_id) as event:
        while True:
            for line in current.page.lines:
                data = {"seq": line.seq, "stream": line.stream.value, "text": line.text}
                yield _event("line", data, line.seq)
            if current.state != shown:
                shown = current.state
                yield _event("state", {"state": shown.value, "exit_code": current.exit_code})
            if current.page.lines:
                await asyncio.sleep(0)  # more may be queued: read on at once
            elif current.ended is not None:
                late = current.ended + LATE_LINES_SECONDS - state.clock.now()
                if late <= 0:
                    yield _event("end", {"state": shown.value, "exit_code": current.exit_code})
                    return
                await wait_for(event, late)
            elif not await wait_for(event, KEEP_ALIVE_SECONDS):
                yield ": keep-alive\n\n"
            current = await state.db.run(tail, job_id, current.page.next_after)
