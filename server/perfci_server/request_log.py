"""One log line per HTTP request (logs.py; docs/operations.md, "What the logs say"): method, route
template, status, latency, the client's address, and for a webhook the forge's delivery id.

The route is the template the request matched (``/v/{public_id}``), never the raw path: a verdict
page's id is its capability, and ids would make every line unique. Bodies, headers (a bearer
token), query strings and unmatched paths are not logged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .forge.registry import KINDS
from .logs import fields

log = logging.getLogger("perfci.request")
DELIVERY_ID_MAX = 128  # as stored (webhook_deliveries.delivery_id)
# A webhook route's last segment names its forge, whose record names the delivery header.
_DELIVERY_HEADERS = {f"/webhooks/{name}": kind.delivery_header.lower().encode("latin-1") for name, kind in KINDS.items()}


class RequestLog:
    """ASGI middleware: the line is written once the response is sent (or the app raised: 500)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._templates: dict[int, str] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: int | None = None

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        except BaseException:
            status = status or 500  # Starlette's outermost error middleware answers it
            raise
        finally:
            _write(scope, self._template(scope), status, (time.perf_counter() - started) * 1000)

    def _template(self, scope: Scope) -> str | None:
        """The matched route's whole template: a route of an included router knows only its own part."""
        route = scope.get("route")
        if route is None:
            # Matched routes FastAPI does not name (its docs and schema): a path without parameters is its own template.
            return scope["path"] if "endpoint" in scope and not scope.get("path_params") else None
        if self._templates is None:
            self._templates = _route_templates(getattr(scope.get("app"), "routes", []))
        return self._templates.get(id(route), getattr(route, "path", None))


def _route_templates(routes: list[Any]) -> dict[int, str]:
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before routers were included by reference: every route has its whole path
        return {}
    return {id(context.original_route): context.path_format for context in iter_route_contexts(routes)
            if context.path_format is not None}


def _write(scope: Scope, route: str | None, status: int | None, duration_ms: float) -> None:
    client = scope.get("client")
    values: dict[str, Any] = {"method": scope["method"], "route": route, "status": status,
                              "duration_ms": round(duration_ms, 1), "client": client[0] if client else None}
    header = _delivery_header(route)
    if header is not None:
        values["delivery_id"] = _header(scope, header)
    level = logging.ERROR if status is not None and status >= 500 else logging.INFO  # None: the client left first
    log.log(level, "request", extra=fields(**values))


def _delivery_header(route: str | None) -> bytes | None:
    if route is None or "/webhooks/" not in route:
        return None
    return _DELIVERY_HEADERS.get(route[route.rindex("/webhooks/"):])


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")[:DELIVERY_ID_MAX]
    return None
