"""Every request's path and query checked at the edge for text the database cannot store
(bounded.REFUSED_IN_TEXT): one 422 with the error envelope, naming where, instead of a driver error
from whichever query meets the string first. Bodies are checked as they are read, within each
route's limit (bodies.py).
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .bounded import REFUSED_IN_TEXT, REFUSED_TEXT_MESSAGE
from .errors import render


class StorableText:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            where = _refused_in_url(scope)
            if where is not None:
                await _refuse(where)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _refused_in_url(scope: Scope) -> tuple[str, ...] | None:
    if REFUSED_IN_TEXT.search(scope["path"]):
        return ("path",)
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if REFUSED_IN_TEXT.search(name) or REFUSED_IN_TEXT.search(value):
            return ("query", name)
    return None


def _refuse(where: tuple[str, ...]) -> JSONResponse:
    details = [{"loc": list(where), "msg": REFUSED_TEXT_MESSAGE}]
    return render(422, "validation_error", f"{'.'.join(where)}: {REFUSED_TEXT_MESSAGE}", details)
