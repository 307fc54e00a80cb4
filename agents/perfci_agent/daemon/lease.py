"""Keeps a job's lease alive from a background thread while the agent builds, runs and uploads.

Renewals happen every third of the lease, so two can fail (a server restart) before the lease
runs out. A 404/409 means the attempt is no longer ours (the lease expired and the job was
requeued, or it was finished): the renewer stops and records why, and the agent abandons the work.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..server_api import AgentClient, ApiError, ServerUnreachable

log = logging.getLogger(__name__)


class LeaseRenewer:
    def __init__(self, make_client: Callable[[], AgentClient], job_id: int, attempt: int, lease_seconds: float) -> None:
        self._make_client = make_client
        self.job_id, self.attempt = job_id, attempt
        self.interval = max(1.0, lease_seconds / 3)
        self.lost: str | None = None
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{job_id}", daemon=True)

    def __enter__(self) -> LeaseRenewer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        # its own HTTP client: the main thread keeps using its own
        with self._make_client() as client:
            while not self._stop.wait(self.interval):
                try:
                    client.renew_lease(self.job_id, self.attempt)
                    self.renewals += 1
                except ServerUnreachable as exc:
                    log.warning("job %d: lease renewal failed, server unreachable (%s); retrying in %.0f s", self.job_id, exc, self.interval)
                except ApiError as exc:
                    if self._stop.is_set():
                        return  # the attempt ended while this renewal was in flight (e.g. its result was stored)
                    if exc.status in (404, 409):
                        self.lost = exc.message
                        log.error("job %d attempt %d: lease lost: %s", self.job_id, self.attempt, exc.message)
                        return
                    log.warning("job %d: lease renewal refused (%s); retrying in %.0f s", self.job_id, exc, self.interval)
