"""The FastAPI application factory."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.utils import get_openapi

from . import bodies, errors, metrics, readiness
from .alerts.router import router as alerts_router
from .agents.router import admin_router as agents_admin_router
from .agents.router import agent_router as agents_agent_router
from .bisect.router import router as bisect_router
from .bounded import BIGINT_MAX
from .configs.router import router as configs_router
from .deps import AdminCredentialsDep, is_admin_caller
from .edge import StorableText
from .request_log import RequestLog
from .jobs.router import agent_router as jobs_agent_router
from .jobs.router import router as jobs_router
from .machines.router import router as machines_router
from .pages.router import router as pages_router
from .repos.router import router as repos_router
from .results.router import agent_router as results_agent_router
from .results.router import document_schema
from .results.router import router as results_router
from .settings import get_settings
from .webhooks.router import router as webhooks_router

API_PREFIX = "/api/v1"


def create_app() -> FastAPI:
    """The app; it reads the settings per request (:func:`get_settings`), none when it is made."""
    app = FastAPI(
        title="perfci",
        summary="Performance-regression CI for DPDK dataplanes: results service",
        version="1",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
    )
    errors.install(app)
    app.add_middleware(StorableText)
    app.add_middleware(RequestLog)  # outermost: its latency covers every other middleware

    api = APIRouter(prefix=API_PREFIX)
    for router in (
        webhooks_router,
        agents_agent_router,
        jobs_agent_router,
        results_agent_router,
        repos_router,
        configs_router,
        machines_router,
        agents_admin_router,
        jobs_router,
        results_router,
        alerts_router,
        bisect_router,
    ):
        api.include_router(router)

    @api.get("/health", tags=["health"], summary="Liveness: the process answers (no dependency checked)")
    async def health() -> dict[str, str]:
        return {"status": "ok", "env": get_settings().env}

    @api.get(
        "/ready",
        tags=["health"],
        summary="Readiness: the database and, where configured, the broker answer",
        responses={503: {"model": errors.ErrorResponse, "description": "A dependency is down; details say which (and why, to an admin)"}},
    )
    def ready(request: Request, credentials: AdminCredentialsDep) -> Any:
        """Admin and API tokens see why a dependency is down; anyone else sees which."""
        current = get_settings()
        checks = readiness.check(current)
        if all(state == "ok" for state in checks.values()):
            return {"status": "ready", "checks": checks}
        down = ", ".join(name for name, state in checks.items() if state != "ok")
        if not is_admin_caller(request, current, credentials, database_up=checks["database"] == "ok"):
            checks = readiness.without_reasons(checks)
        return errors.render(503, "not_ready", f"not ready: {down} unavailable", checks)

    app.include_router(api)
    app.include_router(pages_router)  # the verdict pages forges link to, outside the API
    app.include_router(metrics.router)  # Prometheus's /metrics, outside the API
    bodies.refuse_bodies_parsed_first(app.routes)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated schema plus ResultDocument (the upload body is read raw, so FastAPI can't see it)."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        document = document_schema()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(document.pop("$defs", {}))
        components["ResultDocument"] = document
        bodies.document(schema, app.routes)
        _document_validation_errors(schema)
        _integer_bounds(schema)
        app.openapi_schema = schema
    return app.openapi_schema


def _integer_bounds(node: Any) -> None:
    """FastAPI's OpenAPI model types ``minimum``/``maximum`` as float, so BIGINT's bound comes out
    as 2^63 (9.223372036854776e+18), one past the column: give integer schemas back exact integer
    bounds (every bound this API declares lies within BIGINT, bounded.py)."""
    if isinstance(node, list):
        for item in node:
            _integer_bounds(item)
    elif isinstance(node, dict):
        if node.get("type") == "integer":
            for key in ("minimum", "maximum"):
                if isinstance(node.get(key), float):
                    node[key] = max(-BIGINT_MAX - 1, min(BIGINT_MAX, int(node[key])))
        for value in node.values():
            _integer_bounds(value)


def _document_validation_errors(schema: dict[str, Any]) -> None:
    """Request-validation 422s are rendered by errors.install as ErrorResponse; say so in the schema."""
    error_ref = {"$ref": "#/components/schemas/ErrorResponse"}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            response = operation.get("responses", {}).get("422")
            if response and "HTTPValidationError" in str(response):
                response["content"] = {"application/json": {"schema": error_ref}}
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
