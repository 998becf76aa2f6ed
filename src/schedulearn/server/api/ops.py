"""/healthz and /metrics: for load balancers and Prometheus (no token)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from schedulearn.protocol import Health
from schedulearn.server.api.deps import State

router = APIRouter(tags=["ops"])


@router.get("/healthz", response_model=Health)
async def healthz(state: State) -> Health:
    await state.db.run(_ping)
    return Health(
        database=state.db.backend, policy=state.scheduler.spec or state.settings.default_policy
    )


def _ping(session: object) -> None:
    from sqlalchemy import text

    session.execute(text("SELECT 1"))  # type: ignore[attr-defined]


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(state: State) -> Response:
    await state.db.run(state.metrics.refresh)
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
