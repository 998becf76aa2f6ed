"""Errors a caller can act on, and how every error becomes a JSON body.

Services raise `ServiceError` subclasses with a message that says what to
change; `install` turns them, FastAPI's validation errors and plain HTTP
errors into `protocol.ErrorBody` JSON. `BodyLimit` answers 413 (as JSON)
to a body over the size limit before any route reads it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schedulearn.protocol import ErrorBody

log = logging.getLogger(__name__)


class ServiceError(Exception):
    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(ServiceError):
    status = 400


class Unauthorized(ServiceError):
    status = 401


class Forbidden(ServiceError):
    status = 403


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Unavailable(ServiceError):
    """A part the request needs (the database, the scheduler) is down or full:
    answered 503 with Retry-After; nothing was changed."""

    status = 503

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unservable(ServiceError):
    """A job no node of this cluster could ever run, as submitted."""

    status = 422


class Unkeepable(ServiceError):
    """A change the server's rules refuse as a whole, though each part is well
    formed (a queue tree whose children are promised more than their parent)."""

    status = 422


# The error responses every route may give, for the OpenAPI schema.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Malformed request"},
    401: {"model": ErrorBody, "description": "Missing or unknown token"},
    403: {"model": ErrorBody, "description": "Not allowed for this token"},
    404: {"model": ErrorBody, "description": "No such object"},
    413: {"model": ErrorBody, "description": "Body over the size limit"},
    503: {
        "model": ErrorBody,
        "description": "The database is unavailable or full; nothing was changed. "
        "Try again after `Retry-After` seconds",
        "headers": {
            "Retry-After": {"description": "Seconds to wait", "schema": {"type": "integer"}}
        },
    },
}


def error_json(
    status: int, message: str, detail: Any = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(error=message, detail=detail).model_dump(exclude_none=True)
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse(body, status_code=status, headers=headers)


def _summarise(errors: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def validation_error(errors: Sequence[Mapping[str, Any]]) -> JSONResponse:
    clean = jsonable_encoder(
        [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in errors]
    )
    return JSONResponse({"error": _summarise(errors), "detail": clean}, status_code=422)


def install(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> JSONResponse:
        if isinstance(exc, Unavailable):
            log.warning("answered 503: %s", exc.message)
            return error_json(503, exc.message, headers={"Retry-After": str(exc.retry_after)})
        return error_json(exc.status, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(list(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_json(exc.status_code, str(exc.detail))

    @app.exception_handler(DataError)
    async def _data(_: Request, exc: DataError) -> JSONResponse:
        # A value the database cannot store or compare (out of range, bad text).
        return error_json(400, f"a value is out of range or malformed: {exc.orig}")

    @app.exception_handler(DBAPIError)
    @app.exception_handler(PoolTimeout)
    async def _database(request: Request, exc: DBAPIError | PoolTimeout) -> JSONResponse:
        # A query that ran outside `Database.call` (which classifies its own).
        from schedulearn.server.db import UNAVAILABLE, classify, unavailable

        fault = classify(exc)
        if fault in UNAVAILABLE:
            return await _service(request, unavailable(exc, fault))
        return await _crash(request, exc)

    @app.exception_handler(Exception)
    async def _crash(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_json(500, f"internal error: {type(exc).__name__}")


# Checkpoint and full-log uploads have their own, larger limits (`checkpoint_max_bytes`,
# `log_full_max_bytes`), enforced by the route while it streams the body to disk.
OWN_BODY_LIMIT = re.compile(r"^/api/v1/agent/jobs/\d+/(checkpoint|full-log)$")


class BodyLimit:
    """ASGI middleware: refuse request bodies over `limit` bytes with a JSON 413."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or OWN_BODY_LIMIT.match(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        for key, value in scope.get("headers", ()):
            if key == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = False
                if too_big:
                    await self._refuse(send)
                    return
        seen = 0
        refused = False

        async def limited() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    refused = True
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            if refused:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {"error": f"request body is over the {self.limit}-byte limit; send less"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass
