"""Errors in one place: each carries its status code; one handler renders them; OpenAPI documents them.

Every error body has the same shape, ``{"error": {"code": ..., "message": ..., "details": ...}}``,
including FastAPI's own request-validation errors.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

# What a client should wait before retrying while the database is unreachable (agents and forges
# retry on 503; a PostgreSQL restart or failover takes seconds).
DATABASE_RETRY_AFTER_SECONDS = 10
# The driver's "cannot talk to the database" errors (connection refused or lost, pool exhausted),
# as opposed to errors in what was asked of it.
DATABASE_UNAVAILABLE = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)


class ErrorBody(BaseModel):
    code: str
    message: str
    details: Any | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class PerfciError(Exception):
    status_code = 500
    code = "internal_error"
    description = "Internal error"

    def __init__(self, message: str, details: Any | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class BadRequest(PerfciError):
    status_code, code, description = 400, "bad_request", "Malformed request"


class Unauthorized(PerfciError):
    status_code, code, description = 401, "unauthorized", "Missing or invalid credentials"


class Forbidden(PerfciError):
    status_code, code, description = 403, "forbidden", "Credentials not allowed here"


class NotFound(PerfciError):
    status_code, code, description = 404, "not_found", "No such resource"


class Conflict(PerfciError):
    status_code, code, description = 409, "conflict", "Conflicts with the current state"


class PayloadTooLarge(PerfciError):
    status_code, code, description = 413, "payload_too_large", "Request body over the route's limit (details: the limit and its setting)"


class UnsupportedMediaType(PerfciError):
    status_code, code, description = 415, "unsupported_media_type", "Request body not JSON in UTF-8 (RFC 8259 §8.1)"


class Unprocessable(PerfciError):
    status_code, code, description = 422, "unprocessable", "Well-formed but invalid content"


class ServiceUnavailable(PerfciError):
    status_code, code, description = 503, "database_unavailable", "The database cannot be reached: retry after Retry-After seconds"


def responses(*errors: type[PerfciError]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` for a route that can raise these errors."""
    return {e.status_code: {"model": ErrorResponse, "description": e.description} for e in errors}


def render(status: int, code: str, message: str, details: Any | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    body = ErrorResponse(error=ErrorBody(code=code, message=message, details=details))
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(PerfciError)
    async def _perfci(_: Request, exc: PerfciError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
        return render(exc.status_code, exc.code, exc.message, exc.details, headers)

    async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable during %s %s: %s", request.method, request.url.path, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        headers = {"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)}
        return render(503, ServiceUnavailable.code, "the database is unavailable; retry later", headers=headers)

    for error in DATABASE_UNAVAILABLE:
        app.add_exception_handler(error, _database_unavailable)

    @app.exception_handler(sa_exc.DataError)
    async def _data(request: Request, exc: sa_exc.DataError) -> JSONResponse:
        # A value the database refused (out of range, unstorable text) that no model bound: the
        # request's fault, and its transaction is already rolled back.
        reason = _first_line(exc.orig)
        log.warning("database refused a value in %s %s: %s", request.method, request.url.path, reason)
        return render(422, Unprocessable.code, f"the database refused a value: {reason}")

    @app.exception_handler(sa_exc.IntegrityError)
    async def _integrity(request: Request, exc: sa_exc.IntegrityError) -> JSONResponse:
        # A constraint the services did not check first (a race between two creates, mostly).
        log.warning("constraint violated in %s %s: %s", request.method, request.url.path, _first_line(exc.orig))
        return render(409, Conflict.code, "conflicts with the current state (a database constraint refused it)")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Starlette logs the traceback and re-raises after sending this; the client gets the envelope.
        return render(500, PerfciError.code, f"internal error ({type(exc).__name__}); the server log has the details")

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = validation_details(exc.errors())
        return render(422, "validation_error", summarize(details), details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return render(exc.status_code, "http_error", str(exc.detail), headers=getattr(exc, "headers", None))


def _first_line(error: object) -> str:
    text = str(error)
    return text.splitlines()[0] if text else type(error).__name__


def validation_details(errors: Any) -> list[dict[str, Any]]:
    """Pydantic errors reduced to JSON-safe location + message (inputs may hold NaN or huge blobs)."""
    return [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))} for e in errors][:50]


def summarize(details: list[dict[str, Any]]) -> str:
    if not details:
        return "invalid request"
    first = details[0]
    where = ".".join(first["loc"]) or "body"
    more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
    return f"{where}: {first['msg']}{more}"
