"""One call to a forge's REST API, shaped by its record (kind.py), and what its answer means.

A call either succeeds (2xx), fails for now (:class:`ForgeUnavailable`: no answer, 5xx, 429 — worth
retrying), or is refused (:class:`ForgeRejected`: a 3xx or any other 4xx — a bad token, an unknown
project, an API URL that redirects; retrying the same request cannot help). Redirects are never
followed: the token is scoped to the forge's own host, and a status answered 3xx was not stored.
"""

from __future__ import annotations

import httpx

from .kind import ApiCall


class ForgeUnavailable(Exception):
    """The forge did not take the call this time (network, 5xx, rate limit)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # None: no answer


class ForgeRejected(Exception):
    """The forge refused the call (3xx, or 4xx other than 429)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def call(forge: str, request: ApiCall, timeout: float) -> httpx.Response:
    """Send one call; the 2xx response, or ForgeUnavailable / ForgeRejected."""
    try:
        response = httpx.request(request.method, request.url, headers={**request.headers, "User-Agent": "perfci"},
                                 json=request.body, timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise ForgeUnavailable(f"{forge} {request.url}: {exc.__class__.__name__}: {exc}") from exc
    code = response.status_code
    if code >= 500 or code == 429:
        raise ForgeUnavailable(f"{forge} {request.url}: HTTP {code} {response.text[:300]}", code)
    if 300 <= code < 400:
        where = response.headers.get("location", "?")
        raise ForgeRejected(f"{forge} {request.url}: HTTP {code} redirect to {where[:200]}, not followed: "
                            f"the API URL setting must name the forge's API itself", code)
    if code >= 400:
        raise ForgeRejected(f"{forge} {request.url}: HTTP {code} {response.text[:300]}", code)
    return response


def comment_id_of(forge: str, request: ApiCall, response: httpx.Response) -> str:
    """The id of the comment a create or edit call answered with."""
    try:
        return str(response.json()["id"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ForgeUnavailable(f"{forge} {request.url}: the answer names no comment id: {response.text[:200]}",
                               response.status_code) from exc
