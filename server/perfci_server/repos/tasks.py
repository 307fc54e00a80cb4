"""Celery tasks of the repositories domain. They take ids, own their transactions, and are idempotent.

A push is completed in two steps: the mirror fetch with no transaction open (a slow or hanging forge
holds no branch lock and no pooled connection; the mirror's file lock lets one fetch run at a time,
and a push that waited on it finds its commit there and fetches nothing), then one short transaction
that records the range.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy.orm import Session

from ..celery_app import COMPLETE_PUSHES_TASK, celery_app
from ..db import session_scope
from ..dispatch import retry_later
from ..settings import Settings, get_settings
from . import mirror
from . import repository as repo_sql
from . import service

BATCH = 20  # pushes one sweep retries at most (each may fetch a mirror)


def complete_one(push_id: int, settings: Settings, timeout: float,
                 sessions: Callable[[], AbstractContextManager[Session]] = session_scope) -> tuple[bool, int]:
    """Fetch the push's head into the mirror, then record its range; (complete, commits added).
    ``sessions`` opens each transaction (a test passes its own). Raises ForgeBusy, having tried
    nothing, when the forge's host has no fetch slot free."""
    with sessions() as session:
        target = service.fetch_target(session, push_id)
    if target is None:
        return True, 0
    try:
        mirror.fetch(settings, target.repository, target.after, timeout)
    except mirror.ForgeBusy:
        raise
    except mirror.MirrorUnavailable as exc:
        with sessions() as session:
            service.note_fetch_failure(session, push_id, str(exc), settings)
        return False, 0
    with sessions() as session:
        push = repo_sql.lock_push(session, push_id)
        if push is None or push.complete:
            return True, 0  # another task recorded it meanwhile
        added = service.complete_push(session, push, settings)
        return push.complete, len(added)


@celery_app.task(name=service.COMPLETE_PUSH_TASK, bind=True, max_retries=None, time_limit=600, soft_time_limit=590)
def complete_push(self: Any, push_id: int) -> str:
    """After a push's delivery was answered: its whole range from the mirror, retried with backoff
    (beat's sweep takes over once the retries are used up)."""
    settings = get_settings()
    try:
        complete, added = complete_one(push_id, settings, settings.mirror_fetch_timeout_seconds)
    except mirror.ForgeBusy as exc:  # its forge holds every fetch slot (it may hang): free this worker
        complete_push.apply_async(args=(push_id,), countdown=mirror.ForgeBusy.retry_seconds)
        return f"waiting: {exc}"
    if complete:
        return f"complete: {added} commit(s) added"
    return retry_later(self, settings, f"push {push_id}", RuntimeError("the mirror could not be fetched"),
                       "incomplete: retries used up, beat's sweep goes on")


@celery_app.task(name=COMPLETE_PUSHES_TASK, time_limit=600, soft_time_limit=590)
def complete_pushes() -> dict[str, int]:
    """Periodic (beat): fetch the mirror again for incomplete pushes and record what they lacked."""
    settings = get_settings()
    with session_scope() as session:
        pending = repo_sql.incomplete_pushes(session, BATCH)
    added, completed, unreachable = 0, 0, set()
    for push_id, repository_id in pending:
        if repository_id in unreachable:
            continue  # one failed fetch per repository and sweep
        try:
            complete, n = complete_one(push_id, settings, settings.mirror_fetch_timeout_seconds)
        except mirror.ForgeBusy:
            complete, n = False, 0
        added += n
        completed += complete
        if not complete:
            unreachable.add(repository_id)
    return {"incomplete": len(pending), "completed": completed, "commits_added": added}
