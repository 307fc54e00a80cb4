"""The server's logs: one line per event, as text or as one JSON object per line (docs/operations.md,
"What the logs say").

A line that is an event (a request, a task, a forge post) carries its data as structured fields,
given with :func:`fields` (``log.info("task", extra=fields(name=..., outcome=...))``): the JSON form
puts them next to timestamp, level, logger and message; the text form appends them as
``key=value``. Other lines (libraries, warnings) are their message alone.

:func:`configure` sets the root logger up for `perfci server`, `worker` and `beat` (and for
uvicorn's and Celery's own entry points, through asgi.py and a Celery signal), from
``PERFCI_LOG_FORMAT`` and ``PERFCI_LOG_LEVEL``. Celery's own per-task lines and uvicorn's access
log are turned down, so each request and each task is told once. The task line itself comes from
Celery's signals (:func:`log_tasks`), so the worker and the embedded in-process mode say the same.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

from .settings import Settings

FIELDS = "perfci_fields"  # the LogRecord attribute that holds an event's fields
VALUE_MAX = 500  # characters of one field value (a task's result, an error)

# Loggers that would tell a request, a task or a forge post a second time: uvicorn's access log,
# Celery's "received", "succeeded in" and failure lines (the task line carries the traceback; its
# internal errors, at CRITICAL, still pass), httpx's line per call.
QUIETED = {"uvicorn.access": logging.WARNING, "celery.worker.strategy": logging.WARNING, "celery.app.trace": logging.CRITICAL,
           "httpx": logging.WARNING, "httpcore": logging.WARNING}


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` for a log call whose line is an event with these fields."""
    return {FIELDS: values}


def clip(value: Any) -> Any:
    """A field value as a line may hold it: JSON's own types up to VALUE_MAX characters, anything
    else (or longer) as its text, cut."""
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    if isinstance(value, (str, int, float, bool, type(None), list, dict)) and len(text) <= VALUE_MAX:
        return value
    shown = value if isinstance(value, str) else text
    return shown[: VALUE_MAX - 1] + "…" if len(shown) > VALUE_MAX else shown


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(record.msecs):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: timestamp, level, logger, message, the event's fields, and the
    traceback (``exception``) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"timestamp": _timestamp(record), "level": record.levelname.lower(),
                                "logger": record.name, "message": record.getMessage()}
        for key, value in getattr(record, FIELDS, {}).items():
            line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``2025-06-01T10:00:00.123Z INFO perfci.request request method=GET route=/api/v1/jobs status=200 ...``:
    a value with spaces, quotes or line breaks is written as a JSON string, so a line stays one line."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.name, record.getMessage()]
        for key, value in getattr(record, FIELDS, {}).items():
            parts.append(f"{key}={_text_value(value)}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        plain = value and not any(c.isspace() or c in "\"'=" for c in value) and value.isprintable()
        return value if plain else json.dumps(value, ensure_ascii=False)
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure` installs (recognised, so configuring again replaces it)."""


def configure(settings: Settings, level: str | None = None) -> None:
    """Send every log line of this process to stderr in the configured format and level. Again
    in the same process: the handler is replaced, not added."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(handler)
    handler = _Handler(sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.effective_log_format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel((level or settings.log_level).upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "celery"):
        logger = logging.getLogger(name)  # their own handlers (uvicorn's default config) would print twice
        logger.handlers.clear()
        logger.propagate = True
    for name, quiet in QUIETED.items():
        logging.getLogger(name).setLevel(quiet)
    logging.captureWarnings(True)  # a Python warning is a line like the others (logger py.warnings)


def configured() -> bool:
    return any(isinstance(h, _Handler) for h in logging.getLogger().handlers)


# --- one line per Celery task --------------------------------------------------------------------

task_log = logging.getLogger("perfci.task")
_started: dict[str, list[float]] = {}  # task id -> start times (an eager retry runs inside its own call)
_failures: dict[str, BaseException] = {}


def _task_started(task_id: str, **_: Any) -> None:
    _started.setdefault(task_id, []).append(time.perf_counter())


def _task_failed(task_id: str, exception: BaseException, **_: Any) -> None:
    _failures[task_id] = exception


def _task_retried(request: Any, reason: Any, **_: Any) -> None:
    # Retry carries the error it retries for in .exc; the line says that one, and the delay.
    _failures[request.id] = reason


def _task_ended(task_id: str, task: Any, args: Any = None, kwargs: Any = None, retval: Any = None,
                state: str | None = None, **_: Any) -> None:
    starts = _started.get(task_id) or [time.perf_counter()]
    duration_ms = (time.perf_counter() - starts.pop()) * 1000
    if not starts:
        _started.pop(task_id, None)
    error = _failures.pop(task_id, None)
    if state is None:  # the run was cut short (the process is stopping): the exception on its way out says how
        error = sys.exc_info()[1]
    outcome = {"SUCCESS": "success", "RETRY": "retry", "FAILURE": "failure", None: "interrupted"}.get(state, str(state).lower())
    values: dict[str, Any] = {"name": task.name, "task_id": task_id, "args": clip(list(args or ())),
                              "outcome": outcome, "duration_ms": round(duration_ms, 1),
                              "retries": getattr(task.request, "retries", 0) or 0}
    if kwargs:
        values["kwargs"] = clip(kwargs)
    if outcome == "success":
        values["result"] = clip(retval)
        task_log.info("task", extra=fields(**values))
    elif outcome == "retry":
        values["error"] = clip(str(error if error is not None else retval))
        task_log.warning("task", extra=fields(**values))
    else:
        failure = error if error is not None else retval
        values["error"] = clip(f"{type(failure).__name__}: {failure}")
        exc_info = (type(failure), failure, failure.__traceback__) if isinstance(failure, BaseException) else None
        task_log.error("task", extra=fields(**values), exc_info=exc_info)


def log_tasks() -> None:
    """Connect the task line to Celery's signals (once per process; the worker's and eager mode's alike)."""
    from celery import signals

    signals.task_prerun.connect(_task_started, weak=False, dispatch_uid="perfci.logs.prerun")
    signals.task_failure.connect(_task_failed, weak=False, dispatch_uid="perfci.logs.failure")
    signals.task_retry.connect(_task_retried, weak=False, dispatch_uid="perfci.logs.retry")
    signals.task_postrun.connect(_task_ended, weak=False, dispatch_uid="perfci.logs.postrun")
