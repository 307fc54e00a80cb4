"""Errors the agent reports to the user (never as a traceback)."""

from __future__ import annotations


class MeasureError(Exception):
    """Base class: ``str(exc)`` is the message shown."""


class UsageError(MeasureError):
    """Bad input: not a repository, unknown commit, impossible option (CLI exit status 2)."""


class BuildFailed(MeasureError):
    """The commit does not build. ``of_commit`` false: the build could not run here (a tool missing,
    a timeout): not the commit's failure, so it is neither cached nor reported as the commit's result."""

    def __init__(self, message: str, log_tail: str, of_commit: bool = True) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.of_commit = of_commit


class RunFailed(MeasureError):
    """The dataplane crashed, timed out, or its report was unusable."""

    def __init__(self, message: str, log_tail: str | None = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail


class BackendUnavailable(MeasureError):
    """The requested backend cannot run on this machine; the message says why and what can."""
