"""Every request's path, query and JSON body checked at the edge for text the database cannot
store (bounded.REFUSED_IN_TEXT): one 422 with the error envelope, naming where, instead of a
driver error from whichever query meets the string first (a webhook's repository name is looked
up before its signature is checked, so that query is anonymous).

The body is read here only up to the largest raw-body limit (Settings.webhook_max_bytes,
upload_max_bytes) and handed on unchanged; past that the rest streams through unchecked so a
route's own limit still answers 413 before the whole body is buffered (the database-error
handler in errors.py is the backstop). A body is decoded only when it holds a JSON escape
(``\\u``): a NUL or a lone surrogate can only arrive in JSON that way, raw ones are invalid JSON.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .bounded import REFUSED_IN_TEXT, REFUSED_TEXT_MESSAGE, refused_text_at
from .errors import render
from .settings import get_settings


class StorableText:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        where = _refused_in_url(scope)
        if where is not None:
            await _refuse(where)(scope, receive, send)
            return
        limit = _inspect_limit()
        if _declared_length(scope) > limit:  # the route's own limit answers 413 before reading it
            await self.app(scope, receive, send)
            return
        body, rest = await _read_head(receive, limit)
        if b"\\u" in body:
            where = _refused_in_json(body)
            if where is not None:
                await _refuse(where)(scope, receive, send)
                return
        await self.app(scope, _replay(body, rest, receive), send)


def _inspect_limit() -> int:
    settings = get_settings()
    return max(settings.webhook_max_bytes, settings.upload_max_bytes)


def _declared_length(scope: Scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


def _refused_in_url(scope: Scope) -> tuple[str, ...] | None:
    if REFUSED_IN_TEXT.search(scope["path"]):
        return ("path",)
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if REFUSED_IN_TEXT.search(name) or REFUSED_IN_TEXT.search(value):
            return ("query", name)
    return None


def _refused_in_json(body: bytes) -> tuple[str, ...] | None:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None  # not JSON: the route says what it makes of it
    found = refused_text_at(document)
    return None if found is None else ("body", *found)


async def _read_head(receive: Receive, limit: int) -> tuple[bytes, Message | None]:
    """The body, or its first chunks once they pass ``limit`` bytes, and what stopped the reading
    early (a marker that more body follows, or a disconnect), None when the body ended."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), message
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), None
        if size > limit:
            return b"".join(chunks), {"type": "http.request", "body": b"", "more_body": True}


def _replay(body: bytes, rest: Message | None, receive: Receive) -> Receive:
    """``receive`` as the application would have seen it: the body read so far, then the rest."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": rest is not None}]
    if rest is not None and rest["type"] != "http.request":
        pending.append(rest)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


def _refuse(where: tuple[str, ...]) -> JSONResponse:
    details = [{"loc": list(where), "msg": REFUSED_TEXT_MESSAGE}]
    return render(422, "validation_error", f"{'.'.join(where)}: {REFUSED_TEXT_MESSAGE}", details)
