"""Request bodies: every route reads its body through one of these dependencies, which hold it to
the route's size limit while reading and take only JSON in UTF-8 with text the database can store.

- **Size** (413): a Content-Length over the route's limit is refused before a byte is read; a body
  without one (chunked) is counted as it arrives and refused as soon as it passes the limit. Each
  limit is a setting (``Settings.*_max_bytes``) and the 413 names it, so an operator knows which
  one to raise. Whatever the client still sends is discarded by the server, never buffered.
- **Encoding** (415): JSON is UTF-8 (RFC 8259 §8.1). A UTF-16 or UTF-32 body (with or without a
  byte order mark), a UTF-8 byte order mark, or bytes that are not UTF-8 are refused before any
  parser sees them: Python's ``json.loads`` would decode UTF-16/32, and a lone surrogate in them
  would reach the database driver.
- **Storable text** (422): NUL and unpaired surrogates arrive in valid UTF-8 JSON only as ``\\u``
  escapes; a body holding one is refused naming the field (bounded.refused_text_at).

:func:`json_body` is declared after a route's authentication dependency, so an unauthenticated
caller gets its 401 before its body is read or judged; ``create_app`` refuses a route whose body
FastAPI would parse itself (that happens before any dependency runs). :func:`limited_body` serves
the routes whose caller is identified by the body itself (webhooks: the repository named in the
payload holds the secret), :func:`raw_body` a route that checks the text with :func:`json_text`
once it has authenticated (result uploads, in their one trip to the threadpool).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

import fastapi.routing
from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import models_json_schema
from starlette.requests import ClientDisconnect

from .bounded import REFUSED_TEXT_MESSAGE, refused_text_at
from .errors import BadRequest, PayloadTooLarge, UnsupportedMediaType
from .settings import get_settings

M = TypeVar("M", bound=BaseModel)

RFC = "JSON bodies are UTF-8 (RFC 8259 §8.1)"
# UTF-32LE's mark starts with UTF-16LE's: longest first.
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32LE"), (codecs.BOM_UTF32_BE, "UTF-32BE"), (codecs.BOM_UTF8, "UTF-8"),
    (codecs.BOM_UTF16_LE, "UTF-16LE"), (codecs.BOM_UTF16_BE, "UTF-16BE"),
)
# What each dependency reads, for the OpenAPI document: (the body's model or None for raw, limit setting).
_READS = "__perfci_body__"


def limit_of(setting: str) -> int:
    return int(getattr(get_settings(), setting))


async def read_within(request: Request, setting: str) -> bytes:
    """The whole body, refused with 413 once it passes ``Settings.<setting>`` bytes."""
    limit = limit_of(setting)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(f"a body of {declared} bytes", limit, setting)
    body = bytearray()
    try:
        async for chunk in request.stream():
            if len(body) + len(chunk) > limit:
                raise _too_large("the body", limit, setting)
            body += chunk
    except ClientDisconnect:
        raise BadRequest("the client closed the connection before the body ended") from None
    return bytes(body)


def _too_large(what: str, limit: int, setting: str) -> PayloadTooLarge:
    variable = f"PERFCI_{setting.upper()}"
    return PayloadTooLarge(f"{what} is over this route's {limit}-byte limit ({variable})", {"limit": limit, "setting": variable})


def utf8_text(body: bytes) -> str:
    """The body as text; 415 unless it is UTF-8 without a byte order mark."""
    for mark, encoding in _BYTE_ORDER_MARKS:
        if body.startswith(mark):
            raise UnsupportedMediaType(f"the body starts with a {encoding} byte order mark: {RFC}, without one")
    if b"\x00" in body:  # JSON escapes control characters: a raw NUL byte means UTF-16 or UTF-32
        guess = json.detect_encoding(body).upper().replace("-LE", "LE").replace("-BE", "BE")  # utf-16-le: UTF-16LE
        seen = f"looks like {guess}" if guess != "UTF-8" else f"holds a NUL byte at {body.index(0)}"
        raise UnsupportedMediaType(f"the body {seen}: {RFC}")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsupportedMediaType(f"the body is not UTF-8 (byte {exc.start}): {RFC}") from None


def json_text(body: bytes) -> str:
    """:func:`utf8_text`, and a 422 naming the field when the JSON holds text the database cannot store."""
    text = utf8_text(body)
    if "\\u" in text:  # the only way NUL or a lone surrogate gets into valid UTF-8 JSON
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            return text  # not JSON: the route says what it makes of it
        _refuse_unstorable(document)
    return text


def _refuse_unstorable(document: Any) -> None:
    found = refused_text_at(document)
    if found is not None:
        where = ("body", *found)
        raise RequestValidationError([{"type": "string_unstorable", "loc": where, "msg": REFUSED_TEXT_MESSAGE, "input": None}])


def limited_body(setting: str) -> Callable[[Request], Awaitable[bytes]]:
    """A dependency: the body within ``Settings.<setting>``, checked by :func:`json_text`."""

    async def read(request: Request) -> bytes:
        body = await read_within(request, setting)
        json_text(body)
        return body

    setattr(read, _READS, (None, setting))
    return read


def raw_body(setting: str) -> Callable[[Request], Awaitable[bytes]]:
    """A dependency: the body within ``Settings.<setting>``, unchecked; the route calls :func:`json_text`
    on it once the caller is authenticated."""

    async def read(request: Request) -> bytes:
        return await read_within(request, setting)

    setattr(read, _READS, (None, setting))
    return read


def json_body(model: type[M], setting: str = "body_max_bytes") -> Any:
    """``Depends`` giving the body as ``model``: JSON media type (415), size (413), encoding (415),
    storable text and the model's own validation (422, located under ``body`` as FastAPI does)."""

    async def read(request: Request) -> M:
        _require_json(request.headers.get("content-type"))
        body = await read_within(request, setting)
        if not body:
            raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
        text = utf8_text(body)
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RequestValidationError([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": f"JSON decode error: {exc.msg}", "input": None}]) from None
        except RecursionError:
            raise RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": "JSON nested too deeply", "input": None}]) from None
        _refuse_unstorable(document)
        try:
            return model.model_validate(document)
        except ValidationError as exc:
            raise RequestValidationError([{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]) from None

    setattr(read, _READS, (model, setting))
    return Depends(read)


def _require_json(content_type: str | None) -> None:
    media_type, _, parameters = (content_type or "").partition(";")
    media_type = media_type.strip().lower()
    if not (media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json"))):
        raise UnsupportedMediaType(f"Content-Type is {content_type or 'missing'}: this route takes application/json")
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise UnsupportedMediaType(f"Content-Type declares charset={value.strip()}: {RFC}")


# --- the routes ------------------------------------------------------------------------------------


def api_routes(routes: Iterable[Any]) -> Iterator[Any]:
    """Every API route of an app with its full path (``path_format``), through included routers:
    FastAPI's ``iter_route_contexts`` where it keeps included routers whole, the routes themselves
    where including copies them."""
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    if iterate is None:
        yield from (route for route in routes if isinstance(route, APIRoute))
        return
    yield from (context for context in iterate(list(routes)) if isinstance(context.original_route, APIRoute))


def body_read_by(route: Any) -> tuple[type[BaseModel] | None, str] | None:
    """(model or None for a raw body, limit setting) of the body dependency a route declares, or None."""
    for dependency in route.dependant.dependencies:
        reads = getattr(dependency.call, _READS, None)
        if reads is not None:
            return reads
    return None


def refuse_bodies_parsed_first(routes: Iterable[Any]) -> None:
    """A route with a plain body parameter has it read and parsed by FastAPI before any dependency
    (authentication included) and without a size limit: refuse to build such an app."""
    for route in api_routes(routes):
        if route.body_field is not None:
            raise RuntimeError(f"{route.path} ({route.name}) takes a body FastAPI parses before authenticating it and without a "
                               "size limit: read it with perfci_server.bodies.json_body (after the route's authentication)")


def document(schema: dict[str, Any], routes: Iterable[Any]) -> None:
    """The OpenAPI document of the bodies: each json_body route's request body (its model under
    components), and on every operation with a body its 413 (naming the limit), 415 and 422."""
    read = [(route, body_read_by(route)) for route in api_routes(routes) if route.include_in_schema]
    read = [(route, reads) for route, reads in read if reads is not None]
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    models = sorted({model for _, (model, _) in read if model is not None}, key=lambda m: m.__name__)
    _, definitions = models_json_schema([(model, "validation") for model in models], ref_template="#/components/schemas/{model}")
    for name, definition in definitions.get("$defs", {}).items():
        if components.setdefault(name, definition) != definition:
            raise RuntimeError(f"two schemas named {name}: a request body's and one FastAPI documented (rename one)")
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    for route, (model, setting) in read:
        for method in route.methods:
            operation = schema["paths"][route.path_format][method.lower()]
            if model is not None:
                ref = {"$ref": f"#/components/schemas/{model.__name__}"}
                operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref}}}
            responses = operation.setdefault("responses", {})
            limit = f"PERFCI_{setting.upper()}, {limit_of(setting)} bytes"
            responses["413"] = {"description": f"{PayloadTooLarge.description}: {limit}", "content": error}
            responses["415"] = {"description": UnsupportedMediaType.description, "content": error}
            responses.setdefault("422", {"description": "Validation Error", "content": error})
