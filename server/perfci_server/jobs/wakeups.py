"""Claims that wait for a job: a queued job wakes the agents of its machine at once.

An idle agent asks for a job with ``?wait=N``; the server holds the request until a job of the
agent's machine is queued, or N seconds pass. On PostgreSQL a trigger (migration 0022) sends
NOTIFY perfci_job_queued with the machine id when a job is queued; one LISTEN connection per
server process (per event loop) wakes that machine's waiting claims, which look again. Without
that connection (SQLite, or PostgreSQL while it is down) a waiting claim looks again every
:data:`FALLBACK_LOOK_S` instead. A waiting claim holds no database connection; the listener's
own connection is closed once no claim has waited for :data:`LINGER_S`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from anyio.lowlevel import RunVar
from sqlalchemy.engine import make_url

log = logging.getLogger(__name__)

CHANNEL = "perfci_job_queued"
MAX_CLAIM_WAIT_S = 60.0  # the longest a claim may wait (below the proxies' usual idle timeouts)
FALLBACK_LOOK_S = 0.5  # how often a waiting claim looks when no notification can come
RECONNECT_S = (1.0, 2.0, 5.0, 10.0)  # the listener's delays between attempts to reconnect
LINGER_S = 60.0  # the listener stops this long after the last waiting claim (idle agents wait again within seconds)
IDLE_CHECK_S = 5.0  # how often a listener with nothing to hear checks whether it is still wanted


class Wakeups:
    """One event loop's waiting claims, by machine, and the listener that wakes them."""

    def __init__(self, database_url: str) -> None:
        url = make_url(database_url)
        self._conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False) \
            if url.get_backend_name() == "postgresql" else None
        self._waiting: defaultdict[int, set[asyncio.Event]] = defaultdict(set)
        self._listening = False
        self._task: asyncio.Task[None] | None = None
        self.heard = 0  # notifications received: a claim that saw it change may have missed its job
        self._last_wait = time.monotonic()

    @property
    def listening(self) -> bool:
        """Whether a queued job wakes its claims now (else they look every FALLBACK_LOOK_S)."""
        return self._listening

    @contextmanager
    def waiting(self, machine_id: int) -> Iterator[asyncio.Event]:
        """An event set when a job of ``machine_id`` is queued (and when the listener connects: a job
        may have been queued meanwhile). A job queued between the claim's first look and this shows
        in :attr:`heard`, which the claim read before it looked."""
        self._start()
        event = asyncio.Event()
        self._waiting[machine_id].add(event)
        try:
            yield event
        finally:
            self._waiting[machine_id].discard(event)
            if not self._waiting[machine_id]:
                del self._waiting[machine_id]
            self._last_wait = time.monotonic()

    async def wait(self, event: asyncio.Event, seconds: float) -> None:
        """Until ``event`` is set or ``seconds`` pass (FALLBACK_LOOK_S at most while not listening)."""
        if not self._listening:
            seconds = min(seconds, FALLBACK_LOOK_S)
        try:
            await asyncio.wait_for(event.wait(), timeout=max(seconds, 0.0))
        except TimeoutError:
            pass

    def wake(self, machine_id: int) -> None:
        self.heard += 1
        for event in self._waiting.get(machine_id, ()):
            event.set()

    def _start(self) -> None:
        if self._conninfo is not None and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._listen(), name="perfci-job-wakeups")

    def _wanted(self) -> bool:
        return bool(self._waiting) or time.monotonic() - self._last_wait < LINGER_S

    async def _listen(self) -> None:
        failures = 0
        while self._wanted():
            try:
                async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._listening, failures = True, 0
                    log.info("waiting claims: listening for queued jobs (%s)", CHANNEL)
                    self.heard += 1  # a job may have been queued while not listening: all look
                    for events in list(self._waiting.values()):
                        for event in events:
                            event.set()
                    while self._wanted():
                        async for notice in conn.notifies(timeout=IDLE_CHECK_S):
                            self._wake_payload(notice.payload)
            except (psycopg.Error, OSError) as exc:
                self._listening = False
                delay = RECONNECT_S[min(failures, len(RECONNECT_S) - 1)]
                failures += 1
                log.warning("waiting claims: not listening for queued jobs (%s); they look every %.1f s, "
                            "reconnecting in %.0f s", exc, FALLBACK_LOOK_S, delay)
                await asyncio.sleep(delay)
            finally:
                self._listening = False
        log.info("waiting claims: none for %.0f s, stopped listening for queued jobs", LINGER_S)

    def _wake_payload(self, payload: str) -> None:
        try:
            self.wake(int(payload))
        except ValueError:
            log.warning("waiting claims: ignored a %s notification with payload %r", CHANNEL, payload[:100])


_WAKEUPS: RunVar[Wakeups] = RunVar("perfci_job_wakeups")


def wakeups(database_url: str) -> Wakeups:
    """This event loop's :class:`Wakeups` (made at the first waiting claim)."""
    try:
        return _WAKEUPS.get()
    except LookupError:
        made = Wakeups(database_url)
        _WAKEUPS.set(made)
        return made
