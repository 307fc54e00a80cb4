"""Raw request bodies read with a size limit (413 before the whole body is buffered)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request

from .errors import PayloadTooLarge
from .settings import get_settings


def limited_body(limit_setting: str) -> Callable[[Request], Awaitable[bytes]]:
    """A dependency returning the body, refusing more than ``Settings.<limit_setting>`` bytes."""

    async def read(request: Request) -> bytes:
        limit: int = getattr(get_settings(), limit_setting)
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"body of {declared} bytes is over the {limit}-byte limit")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"body is over the {limit}-byte limit")
            chunks.append(chunk)
        return b"".join(chunks)

    return read
