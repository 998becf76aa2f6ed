"""/healthz, /readyz and /metrics: for load balancers, orchestrators and Prometheus (no token);
/api/v1/protocol: the protocol versions this server speaks, for a client's probe.

/healthz is liveness: the process is up and serving (it touches nothing,
so it answers even while the database is down). /readyz is readiness: the
database answers and the scheduler loop is turning; otherwise 503 with
Retry-After, saying which.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from sqlmodel import Session

from schedulearn.protocol import (
    OLDEST_PROTOCOL,
    PROTOCOL_VERSION,
    ErrorBody,
    Health,
    ProtocolRange,
)
from schedulearn.server.api.deps import State
from schedulearn.server.errors import Unavailable
from schedulearn.server.state import AppState

router = APIRouter(tags=["ops"])

# A scheduler loop turns at least every tick; one silent for this many ticks
# (and never less than this many seconds) is stuck.
_STUCK_TICKS = 10
_STUCK_SECONDS = 30.0


def _health(state: AppState) -> Health:
    return Health(
        database=state.db.backend, policy=state.scheduler.spec or state.settings.default_policy
    )


def health_of(app: Any) -> dict[str, str]:
    """The /healthz body of a built app, for `server.guard` (which answers it below the app)."""
    return _health(app.state.sl).model_dump()


@router.get("/healthz", response_model=Health, summary="Liveness: the process serves requests")
async def healthz(state: State) -> Health:
    return _health(state)


@router.get(
    "/api/v1/protocol",
    response_model=ProtocolRange,
    summary="The protocol versions this server speaks (no token): a client's probe",
)
async def protocol_range() -> ProtocolRange:
    # Also in every /api/ reply's Schedulearn-Server-Protocol header; a client
    # asks here first, since a server of protocol 2 answers only its refusals so.
    return ProtocolRange(oldest=OLDEST_PROTOCOL, newest=PROTOCOL_VERSION)


@router.get(
    "/readyz",
    response_model=Health,
    summary="Readiness: the database answers and the scheduler loop is turning",
    responses={
        503: {
            "model": ErrorBody,
            "description": "Not ready: the database is unavailable or the scheduler is stuck",
            "headers": {
                "Retry-After": {"description": "Seconds to wait", "schema": {"type": "integer"}}
            },
        }
    },
)
async def readyz(state: State) -> Health:
    await state.db.run(_ping)
    within = max(_STUCK_SECONDS, _STUCK_TICKS * state.settings.tick_seconds)
    if not state.scheduler.alive(within):
        raise Unavailable(
            f"the scheduler loop has not turned in {within:g} s; see the server log",
            retry_after=5,
        )
    return _health(state)


def _ping(session: Session) -> None:
    from sqlalchemy import text

    session.execute(text("SELECT 1"))


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(state: State) -> Response:
    await state.db.run(state.metrics.refresh)
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
