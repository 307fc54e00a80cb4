"""The results service over HTTP: one transport (:class:`ApiClient`) for the agent daemon's
:class:`AgentClient`, the demo, and the user's client of the `perfci` commands
(:class:`perfci_cli.client.ServerClient`, which builds on this one). Errors come back as
:class:`ApiError` carrying the server's error body (``{"error": {"code", "message", "details"}}``)
or, when the server is unreachable, :class:`ServerUnreachable`."""

from __future__ import annotations

from typing import Any, Self

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"
API_PREFIX = "/api/v1"


class ApiError(Exception):
    """The server answered with an error status."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details


class ServerUnreachable(Exception):
    """No answer at all (connection refused, timeout, DNS): worth retrying later."""


def is_transient(exc: Exception) -> bool:
    """Worth retrying later: no answer, a server-side error, or "slow down" (408/429)."""
    if isinstance(exc, ServerUnreachable):
        return True
    return isinstance(exc, ApiError) and (exc.status >= 500 or exc.status in (408, 429))


class ApiClient:
    """Requests to ``/api/v1`` of one server, with a bearer token when one is given."""

    def __init__(self, base_url: str = DEFAULT_URL, token: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(base_url=self.base_url + API_PREFIX, headers=headers, timeout=timeout,
                                  transport=transport)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request; a 4xx/5xx raises ApiError, no answer raises ServerUnreachable."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"{self.base_url}: {exc.__class__.__name__}: {exc}") from exc
        if response.status_code >= 400:
            raise _error(response)
        return response

    def get(self, path: str, **params: Any) -> Any:
        params = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", path, params=params).json()

    def post(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        response = self.request("POST", path, json=json, **kwargs)
        return response.json() if response.content else None

    def put(self, path: str, content: bytes, content_type: str = "application/json") -> httpx.Response:
        """PUT a body as given (bytes, so a retry sends exactly the same document)."""
        return self.request("PUT", path, content=content, headers={"Content-Type": content_type})


class AgentClient(ApiClient):
    """The agent-facing endpoints (enroll, heartbeat, claim, lease, result, failure, release).

    Bodies and answers are plain dicts: the agent does not import the server's schemas.
    """

    def enroll(self, enrollment_token: str, name: str, machine_id: str, machine: dict[str, Any],
               backends: list[str], version: str) -> dict[str, Any]:
        return self.post("/agent/enroll", {"enrollment_token": enrollment_token, "name": name, "machine_id": machine_id,
                                           "machine": machine, "machine_name": name, "backends": backends, "version": version})

    def heartbeat(self, backends: list[str] | None = None, version: str | None = None,
                  stopped_claiming: str | None = None) -> dict[str, Any]:
        """``stopped_claiming``: why this agent does not claim jobs; None says it claims."""
        body: dict[str, Any] = {k: v for k, v in (("backends", backends), ("version", version)) if v is not None}
        body["stopped_claiming"] = stopped_claiming
        return self.post("/agent/heartbeat", body)

    def claim(self, wait: float = 0.0) -> dict[str, Any] | None:
        """The next job for this machine, or None when nothing is queued (204). ``wait``: seconds
        the server may hold the request until a job is queued (a server that does not wait answers
        at once)."""
        if not wait:
            return self.post("/agent/jobs/claim")
        return self.post("/agent/jobs/claim", params={"wait": wait}, timeout=self.timeout + wait)

    def renew_lease(self, job_id: int, attempt: int) -> dict[str, Any]:
        return self.post(f"/agent/jobs/{job_id}/lease", {"attempt": attempt})

    def upload_result(self, job_id: int, attempt: int, document: bytes) -> httpx.Response:
        """201 stored, 200 the same document was already stored (a retry); errors raise."""
        return self.put(f"/agent/jobs/{job_id}/attempts/{attempt}/result", document)

    def report_failure(self, job_id: int, attempt: int, reason: str, log_tail: str | None = None) -> dict[str, Any]:
        return self.post(f"/agent/jobs/{job_id}/attempts/{attempt}/failure", {"reason": reason, "log_tail": log_tail})

    def release(self, job_id: int, attempt: int, reason: str) -> dict[str, Any]:
        return self.post(f"/agent/jobs/{job_id}/attempts/{attempt}/release", {"reason": reason})


def _error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()["error"]
        return ApiError(response.status_code, str(body.get("code", "error")), str(body.get("message", "")), body.get("details"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return ApiError(response.status_code, "http_error", response.text[:500] or response.reason_phrase)
