"""Send Celery tasks only after the current transaction commits (the task must see the rows).

``sender`` is the one place a task leaves the process; tests replace it to record what was sent.

:func:`send_once_after_commit` coalesces: at most one task of a name and arguments waits in the
queue at a time. Its mark is a Redis key set with NX next to the broker's queue; the task removes
it with :func:`started` before it reads anything, so a write committed after that sends a new task
and a write committed before it is seen by the running one. Without a Redis broker (the embedded
default runs tasks in-process at once) every call sends.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.orm import Session

from . import db
from .settings import Settings, get_settings

log = logging.getLogger(__name__)

# Tasks one room sends to another, by name: the sender need not import the room that does the work.
PULL_EVALUATE_TASK = "perfci.pulls.evaluate"  # a pull request's job ended: decide its verdict again
BACKFILL_TASK = "perfci.jobs.backfill"  # a config was added: history for it (machine ids, config ids)
FORGET_ABANDONED_TASK = "perfci.alerts.forget_abandoned"  # a force push took commits off a branch
DETECT_TASK = "perfci.alerts.detect_pending"  # a run was stored: detect on its machine's new runs (machine id)
REDETECT_BRANCH_TASK = "perfci.alerts.redetect_branch"  # a branch's order changed: detect over it again (branch id)
DECIDE_SERIES_TASK = "perfci.alerts.decide_series"  # series verdicts left pending: decide again (machine id, commit ids)

# A mark outlives a lost task by at most this long; the sweeps that go with coalesced tasks
# (alerts' detection sweep) resend sooner than that.
MARK_SECONDS = 600


def _send_with_celery(name: str, args: tuple[Any, ...]) -> None:
    from .celery_app import registered_tasks

    # The registered task object (not send_task) so the embedded eager mode runs it in-process.
    registered_tasks()[name].apply_async(args=args)


sender: Callable[[str, tuple[Any, ...]], None] = _send_with_celery


def send_after_commit(session: Session, name: str, *args: Any) -> None:
    db.after_commit(session, lambda: _send(name, args))


def send_once_after_commit(session: Session, name: str, *args: Any) -> None:
    """As :func:`send_after_commit`, unless the same task is already waiting to start."""

    def _send_unless_waiting() -> None:
        if _mark(name, args) and not _send(name, args):
            started(name, *args)  # nothing was queued: the next write must try again

    db.after_commit(session, _send_unless_waiting)


def send_now(name: str, *args: Any) -> None:
    """Send regardless of a mark, and set it (a sweep resending work a lost task left behind)."""
    _mark(name, args)
    _send(name, args)


def started(name: str, *args: Any) -> None:
    """Called by a coalesced task first thing: later writes must send a new task."""
    client = _redis()
    if client is None:
        return
    try:
        client.delete(_key(name, args))
    except Exception:  # the mark expires on its own; the task's work is what matters now
        log.warning("could not clear the queued mark of %s%r", name, args, exc_info=True)


def _send(name: str, args: tuple[Any, ...]) -> bool:
    try:
        sender(name, args)
        return True
    except Exception:  # the data is committed either way; a failed send must not fail the request
        log.exception("could not send task %s%r", name, args)
        return False


def _mark(name: str, args: tuple[Any, ...]) -> bool:
    """Set the waiting mark; False when it was already set (a task is waiting: send nothing)."""
    client = _redis()
    if client is None:
        return True
    try:
        return bool(client.set(_key(name, args), b"1", nx=True, ex=MARK_SECONDS))
    except Exception:  # a duplicate task is harmless, a missing one is not
        log.warning("could not check the queued mark of %s%r; sending", name, args, exc_info=True)
        return True


def _key(name: str, args: tuple[Any, ...]) -> str:
    return "perfci.queued:" + name + ":" + ":".join(str(a) for a in args)


_redis_lock = threading.Lock()
_redis_clients: dict[str, Any] = {}


def _redis() -> Any:
    """A Redis client on the broker (one connection pool per URL and process), or None."""
    url = get_settings().broker_url
    if not url or not url.startswith(("redis://", "rediss://", "unix://")):
        return None
    with _redis_lock:
        client = _redis_clients.get(url)
        if client is None:
            import redis

            client = _redis_clients[url] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        return client


def retry_later(task: Any, settings: Settings, what: str, error: Exception, used_up: str) -> str:
    """Retry a bound Celery ``task`` that waits on a forge (a post, a fetch) after the backoff
    (doubling, capped) while it has retries left; then say so and answer ``used_up``: the sweep
    that goes with the task takes over."""
    retries = task.request.retries
    if retries >= settings.forge_max_retries:
        log.warning("%s: %s; retries used up, the sweep takes over", what, error)
        return used_up
    delay = retry_delay(settings, retries)
    log.warning("%s: %s; retry %d in %.1f s", what, error, retries + 1, delay)
    raise task.retry(countdown=delay, exc=error)


def retry_delay(settings: Settings, retries: int) -> float:
    return min(settings.forge_retry_backoff_seconds * 2 ** retries, settings.forge_retry_backoff_max_seconds)


@contextmanager
def slot(name: str, limit: int, seconds: float) -> Iterator[bool]:
    """Hold one of ``limit`` slots called ``name`` while the block runs: True when one was free,
    False when all are held (the caller comes back later instead of waiting). Slots live in Redis
    next to the broker, so every worker process sees them; one a killed process held expires after
    ``seconds``. Without a Redis broker (tasks run in-process) there is nothing to share: True."""
    client = _redis()
    held: str | None = None
    token = uuid.uuid4().hex
    if client is not None:
        try:
            for i in range(max(1, limit)):
                key = f"perfci.slot:{name}:{i}"
                if client.set(key, token, nx=True, ex=max(1, math.ceil(seconds))):
                    held = key
                    break
        except Exception:  # a broker hiccup must not stop the work; the limit is a courtesy to others
            log.warning("could not take a %s slot; going ahead", name, exc_info=True)
            client = None
    try:
        yield client is None or held is not None
    finally:
        if held is not None:
            try:
                if client.get(held) == token.encode():
                    client.delete(held)
            except Exception:  # it expires on its own
                log.warning("could not free the %s slot", name, exc_info=True)
