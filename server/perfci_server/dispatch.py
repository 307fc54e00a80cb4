"""Send Celery tasks only after the current transaction commits (the task must see the rows).

``sender`` is the one place a task leaves the process; tests replace it to record what was sent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from . import db

log = logging.getLogger(__name__)


def _send_with_celery(name: str, args: tuple[Any, ...]) -> None:
    from .celery_app import celery_app

    # The registered task object (not send_task) so the embedded eager mode runs it in-process.
    celery_app.tasks[name].apply_async(args=args)


sender: Callable[[str, tuple[Any, ...]], None] = _send_with_celery


def send_after_commit(session: Session, name: str, *args: Any) -> None:
    def _send() -> None:
        try:
            sender(name, args)
        except Exception:  # the data is committed either way; a failed send must not fail the request
            log.exception("could not send task %s%r", name, args)

    db.after_commit(session, _send)
