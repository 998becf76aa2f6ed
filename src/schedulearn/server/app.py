"""`create_app(settings)`: the FastAPI application, its lifespan and its schema.

Owns start-up: migrate the database, make the first admin and agent
tokens (stored hashed, written once to a 0600 file), start the scheduler loop; and
shut-down. Each call builds an independent app with its own database,
events and metrics, so tests never share state.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from sqlalchemy.exc import IntegrityError

import schedulearn
from schedulearn.clock import Clock, SystemClock
from schedulearn.protocol import JobSpec
from schedulearn.server import auth, db, errors, versioning
from schedulearn.server.api import agent, cluster, enroll, jobs, ops, profiles
from schedulearn.server.api import queues as queue_routes
from schedulearn.server.api import tokens as token_routes
from schedulearn.server.api import users as user_routes
from schedulearn.server.api.fast_agent import FastAgent
from schedulearn.server.api.fast_submit import FastSubmit
from schedulearn.server.batching import Batcher
from schedulearn.server.heartbeat_book import HeartbeatBook
from schedulearn.server.heartbeat_pace import HeartbeatPace
from schedulearn.server.metrics import Metrics
from schedulearn.server.scheduler import Scheduler
from schedulearn.server.services import agent_access, idempotency, tokens
from schedulearn.server.services.predictions import Predictor
from schedulearn.server.services.snapshot import ShapeCache
from schedulearn.server.state import AppState
from schedulearn.server.wakeups import Wakeups
from schedulearn.server.workwatch import WorkWatch
from schedulearn.settings import ServerSettings

log = logging.getLogger("schedulearn.server")


def _fastapi_telemetry_off() -> dict[str, Any]:
    """FastAPI's OpenTelemetry hooks (where FastAPI has them), off unless the operator
    asks FastAPI to set OpenTelemetry up (`FASTAPI_OTEL_AUTO_CONFIGURE=true`).
    Schedulearn's own figures are its `/metrics`; with the hooks on, every
    request asks the OpenTelemetry API whether a provider was configured,
    about 2% of the server's CPU a submission under `bench/api_load.py`."""
    wanted = os.environ.get("FASTAPI_OTEL_AUTO_CONFIGURE", "").lower() == "true"
    if wanted or importlib.util.find_spec("fastapi.telemetry") is None:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


def bootstrap(database: db.Database, settings: ServerSettings, now: float) -> dict[auth.Role, str]:
    """Migrate, then make sure a working admin and agent token exist.

    Tokens given in the settings are stored (hashed); otherwise a new one is
    made for a role none of whose tokens works any more (a new database, or
    every admin token revoked), and returned so it can be written to the
    token file. Never printed.
    """
    db.migrate(database.engine)
    # Replicas starting at once on one PostgreSQL each store the settings'
    # tokens (and their users): the second insert of the same row fails on
    # its unique index. It was stored, by the other replica: read again.
    try:
        return _store_tokens(database, settings, now)
    except IntegrityError:
        log.info("another replica stored the same tokens at once; reading them again")
        return _store_tokens(database, settings, now)


def _store_tokens(
    database: db.Database, settings: ServerSettings, now: float
) -> dict[auth.Role, str]:
    made: dict[auth.Role, str] = {}
    with database.session() as session:
        for role, given in (
            (auth.Role.ADMIN, settings.admin_token),
            (auth.Role.AGENT, settings.agent_token),
        ):
            if given:
                tokens.issue(session, role.value, role, now, "from the settings", secret=given)
            elif not tokens.has_working(session, role, now):
                made[role] = tokens.issue(session, role.value, role, now, "first start")[1]
    return made


def create_app(settings: ServerSettings, clock: Clock | None = None) -> FastAPI:
    clock = clock or SystemClock()
    database = db.Database(
        settings.database_url,
        db.Timeouts(
            connect_seconds=settings.database_connect_timeout_seconds,
            statement_seconds=settings.database_statement_timeout_seconds,
            answer_seconds=settings.database_answer_seconds,
        ),
    )
    wakeups = Wakeups()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # In a thread: the loop keeps answering /healthz while migrations run.
        made = await asyncio.to_thread(bootstrap, database, settings, clock.now())
        if made:
            # Written to a file only this user can read, never to a log.
            path = tokens.write_first_tokens(tokens.first_tokens_path(settings), made)
            roles = " and ".join(f"an {r.value} token" for r in made)
            print(
                f"Schedulearn made {roles} and wrote them to {path} (readable only by you); "
                "keep them, then delete the file",
                file=sys.stderr,
            )
        sl.scheduler.started_at = clock.now()
        sl.scheduler.start()
        log.info("schedulearn server ready (%s)", database.backend)
        try:
            yield
        finally:
            await sl.scheduler.stop()
            await sl.predictions.stop()
            await sl.work_watch.stop()
            if sl.heartbeats is not None:
                await sl.heartbeats.stop()
            database.close()

    app = FastAPI(
        title="Schedulearn",
        version=schedulearn.__version__,
        description="Schedule deep-learning training jobs on GPU servers.",
        lifespan=lifespan,
        **_fastapi_telemetry_off(),
    )
    shape = ShapeCache()
    pace = HeartbeatPace.of(settings)
    scheduler = Scheduler(database, wakeups, settings, clock, metrics, shape, pace)
    sl = AppState(
        settings=settings,
        db=database,
        clock=clock,
        wakeups=wakeups,
        tokens=auth.TokenCache(
            settings.auth_cache_seconds,
            auth.PriorityRange(settings.user_priority_min, settings.user_priority_max),
        ),
        metrics=metrics,
        scheduler=scheduler,
        submitter=Batcher(database, idempotency.submit, clock.now, lambda: shape),
        log_batcher=Batcher(
            database, agent_access.append_logs_many, lambda: settings.log_stored_max_bytes
        ),
        shape=shape,
        predictions=Predictor(
            database,
            clock,
            settings.default_policy,
            min_resize_age=settings.min_resize_age_seconds,
            queue_min_run=settings.queue_min_run_seconds,
        ),
        work_watch=WorkWatch(database, wakeups, clock),
        pace=pace,
    )
    if settings.heartbeat_flush_seconds > 0:
        sl.heartbeats = HeartbeatBook(
            database,
            lambda: sl.timing.report_grace,
            lambda written: agent.heartbeats_written(sl, written),
            settings.heartbeat_flush_seconds,
        )
        scheduler.claim = sl.heartbeats.claim_silent
    app.state.sl = sl
    errors.install(app)
    # Innermost: the body limit and the protocol check judge its requests too.
    app.add_middleware(FastSubmit)
    app.add_middleware(FastAgent)
    app.add_middleware(errors.BodyLimit, limit=settings.max_body_bytes)
    # Added last, so it runs first: a refused client gets the version message
    # before anything else judges its request.
    app.add_middleware(versioning.ProtocolCheck)
    for module in (jobs, cluster, enroll, agent, ops, profiles, token_routes, user_routes):
        app.include_router(module.router)
    app.include_router(queue_routes.router)
    app.include_router(token_routes.web_login_router)
    if importlib.util.find_spec("schedulearn.server.web") is not None:
        # The web dashboard (its own package) mounts its pages under /ui.
        importlib.import_module("schedulearn.server.web").install(app)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            spec_schema = JobSpec.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in spec_schema.pop("$defs", {}).items():
                components.setdefault(name, sub)
            components["JobSpec"] = spec_schema
            versioning.document(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema
    return app
